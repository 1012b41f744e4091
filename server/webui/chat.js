// The chat page (GET /). Conversations live in this browser's localStorage;
// each answer streams from the daemon's own POST /v1/chat/completions as
// server-sent events read with fetch and a ReadableStream. Stop aborts the
// fetch: the daemon sees the connection close and ends the generation
// within one decode step. Qwen3's thinking arrives as
// delta.reasoning_content, apart from delta.content, and is shown folded
// above the answer; the answer is rendered as Markdown (markdown.js). The
// figures under an answer come from the final chunk's `timings` and the
// usage chunk (stream_options.include_usage).

import { el, api, errorText, setupKeyForm, storageGet, storageSet, apiKey, setApiKey, fmtNum } from './common.js';
import { renderMarkdown } from './markdown.js';

const CONV_STORE = 'qwen3d.conversations';
const CURRENT_STORE = 'qwen3d.current';
const SETTINGS_STORE = 'qwen3d.settings';
const SAMPLING = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed', 'repetition_penalty',
  'presence_penalty', 'frequency_penalty'];
const SAVE_EVERY_MS = 1000;

const $ = (id) => document.getElementById(id);

// [{id, title, updated, messages: [{role, content, reasoning, state, error, stats}]}], most recent first.
let conversations = storageGet(CONV_STORE, []);
if (!Array.isArray(conversations)) conversations = [];
let currentId = storageGet(CURRENT_STORE, null);
const settings = { system: '', thinking: true, sampling: {}, ...storageGet(SETTINGS_STORE, {}) };
let streaming = null; // {controller, msg}
const nodes = new Map(); // message -> its element

// A page closed while an answer streamed left it half-written.
for (const c of conversations)
  for (const m of c.messages || []) if (m.state === 'streaming') m.state = 'stopped';

const current = () => conversations.find((c) => c.id === currentId) || null;

// Saves the conversations; when the browser's quota is reached, the oldest go first.
function save() {
  while (!storageSet(CONV_STORE, conversations) && conversations.length > 1) conversations.pop();
  storageSet(CURRENT_STORE, currentId);
}

function saveSettings() {
  storageSet(SETTINGS_STORE, settings);
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

// ---- rendering -----------------------------------------------------------------

function statsLine(m) {
  const s = m.stats || {}, bits = [];
  if (s.completion_tokens !== undefined) bits.push(`${s.completion_tokens} tokens`);
  if (s.prompt_tokens !== undefined) bits.push(`prompt ${s.prompt_tokens}`);
  if (s.ttft_ms !== undefined) bits.push(`TTFT ${fmtNum(s.ttft_ms)} ms`);
  if (s.decode_tokens_per_s !== undefined) bits.push(`${fmtNum(s.decode_tokens_per_s)} tokens/s`);
  if (m.finish === 'length') bits.push('cut at max_tokens');
  if (m.state === 'stopped') bits.push('stopped');
  const node = el('div', { class: 'stats' }, bits.join(' · '));
  for (const [k, v] of Object.entries(s)) node.dataset[k.replace(/_(\w)/g, (_, x) => x.toUpperCase())] = v;
  return node;
}

function fillMessage(node, m) {
  node.dataset.state = m.state || 'done';
  if (m.role === 'user') {
    node.replaceChildren(el('div', { class: 'bubble' }, m.content));
    return;
  }
  const parts = [];
  if (m.reasoning) {
    const wasOpen = node.querySelector('details.think')?.open;
    const thinking = m.state === 'streaming' && !m.content;
    parts.push(el('details', { class: 'think', open: wasOpen },
      el('summary', {}, thinking ? 'Thinking…' : 'Thoughts'), el('div', { class: 'think-body' }, m.reasoning)));
  }
  const body = el('div', { class: 'md' });
  body.append(renderMarkdown(m.content || ''));
  if (m.state === 'streaming') body.append(el('span', { class: 'cursor', 'aria-hidden': 'true' }));
  parts.push(body);
  if (m.error) parts.push(el('div', { class: 'error' }, m.error));
  parts.push(statsLine(m));
  node.replaceChildren(...parts);
}

function renderMessages() {
  const box = $('messages'), conv = current();
  nodes.clear();
  const list = conv ? conv.messages : [];
  box.replaceChildren(...list.map((m) => {
    const node = el('div', { class: 'msg ' + m.role });
    fillMessage(node, m);
    nodes.set(m, node);
    return node;
  }));
  if (!list.length) box.append(el('p', { class: 'empty muted' }, 'Type a message to start.'));
  box.scrollTop = box.scrollHeight;
}

function renderSidebar() {
  $('conversations').replaceChildren(...conversations.map((c) => el('li', { class: c.id === currentId ? 'active' : null },
    el('button', { type: 'button', class: 'conv', title: c.title, onclick: () => select(c.id) }, c.title || 'New chat'),
    el('button', {
      type: 'button', class: 'del', 'aria-label': 'Delete this conversation',
      onclick: () => remove(c.id),
    }, '×'))));
}

function select(id) {
  if (streaming) return;
  currentId = id;
  save();
  renderSidebar();
  renderMessages();
  document.body.classList.remove('sidebar-open');
}

function remove(id) {
  if (streaming && current()?.id === id) return;
  if (!window.confirm('Delete this conversation?')) return;
  conversations = conversations.filter((c) => c.id !== id);
  if (currentId === id) currentId = null;
  save();
  renderSidebar();
  renderMessages();
}

// Re-renders a streaming message at most once per frame.
let pending = null;
function scheduleRender(m) {
  if (pending) return;
  pending = requestAnimationFrame(() => {
    pending = null;
    const node = nodes.get(m);
    if (!node) return;
    const box = $('messages');
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    fillMessage(node, m);
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
}

// ---- talking to the daemon -------------------------------------------------------

function requestBody(conv, answer) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
  for (const m of conv.messages) {
    if (m === answer || (m.role === 'assistant' && (m.state === 'error' || !m.content))) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const body = {
    messages,
    stream: true,
    stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: !!settings.thinking },
  };
  for (const f of SAMPLING) {
    const v = settings.sampling[f];
    if (v !== undefined && v !== '' && Number.isFinite(Number(v))) body[f] = Number(v);
  }
  return body;
}

// One SSE event's data: a chunk, the usage chunk, an error, or [DONE].
function onEvent(text, m) {
  const data = text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
  if (!data || data === '[DONE]') return;
  let j;
  try {
    j = JSON.parse(data);
  } catch {
    return;
  }
  if (j.error) {
    m.state = 'error';
    m.error = j.error.message || 'the server ended the answer with an error';
    return;
  }
  const ch = j.choices && j.choices[0];
  if (ch) {
    const d = ch.delta || {};
    if (typeof d.reasoning_content === 'string') m.reasoning = (m.reasoning || '') + d.reasoning_content;
    if (typeof d.content === 'string') m.content += d.content;
    if (ch.finish_reason) m.finish = ch.finish_reason;
  }
  m.stats = m.stats || {};
  if (j.usage) {
    m.stats.prompt_tokens = j.usage.prompt_tokens;
    m.stats.completion_tokens = j.usage.completion_tokens;
  }
  if (j.timings) {
    m.stats.ttft_ms = j.timings.ttft_ms;
    m.stats.decode_tokens_per_s = j.timings.decode_tokens_per_s;
  }
}

async function readStream(res, m) {
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = '', saved = Date.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      onEvent(buf.slice(0, k), m);
      buf = buf.slice(k + 2);
    }
    scheduleRender(m);
    if (Date.now() - saved > SAVE_EVERY_MS) {
      save();
      saved = Date.now();
    }
  }
  onEvent(buf + dec.decode(), m);
}

async function send(text) {
  let conv = current();
  if (!conv) {
    conv = { id: newId(), title: '', updated: 0, messages: [] };
    conversations.unshift(conv);
    currentId = conv.id;
  }
  if (!conv.title) conv.title = text.replace(/\s+/g, ' ').trim().slice(0, 60);
  conv.messages.push({ role: 'user', content: text });
  const m = { role: 'assistant', content: '', reasoning: '', state: 'streaming' };
  conv.messages.push(m);
  conv.updated = Date.now();
  conversations = [conv, ...conversations.filter((c) => c !== conv)];
  save();
  renderSidebar();
  renderMessages();
  streaming = { controller: new AbortController(), msg: m };
  setBusy(true);
  try {
    const res = await api('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(requestBody(conv, m)),
      signal: streaming.controller.signal,
    });
    if (!res.ok) {
      m.state = 'error';
      m.error = await errorText(res);
    } else {
      await readStream(res, m);
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      m.state = 'stopped';
    } else {
      m.state = 'error';
      m.error = 'the connection failed: ' + (e.message || e);
    }
  }
  if (m.state === 'streaming') m.state = 'done';
  streaming = null;
  setBusy(false);
  save();
  const node = nodes.get(m);
  if (node) fillMessage(node, m);
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  document.body.classList.toggle('busy', busy);
}

async function loadModel() {
  try {
    const res = await api('/v1/models');
    if (!res.ok) {
      $('model').textContent = res.status === 401 ? 'API key needed' : await errorText(res);
      return;
    }
    const j = await res.json();
    const d = j.data && j.data[0];
    if (!d) return;
    $('model').textContent = `${d.id} · ${d.max_model_len ? d.max_model_len.toLocaleString('en-US') + ' tokens of context' : 'loading…'}`;
    // The context length is known once the model has loaded.
    if (!d.max_model_len) setTimeout(loadModel, 2000);
  } catch (e) {
    $('model').textContent = 'the server is unreachable';
  }
}

// ---- controls -------------------------------------------------------------------

function setupSettings() {
  const dlg = $('settings');
  const sys = $('system'), key = $('settings-key');
  $('settings-open').addEventListener('click', () => {
    sys.value = settings.system;
    key.value = apiKey();
    for (const f of SAMPLING) $(f).value = settings.sampling[f] ?? '';
    dlg.showModal();
  });
  sys.addEventListener('input', () => {
    settings.system = sys.value;
    saveSettings();
  });
  key.addEventListener('change', () => {
    setApiKey(key.value.trim());
    loadModel();
  });
  for (const f of SAMPLING) {
    $(f).addEventListener('input', (ev) => {
      settings.sampling[f] = ev.target.value;
      saveSettings();
    });
  }
  $('settings-reset').addEventListener('click', () => {
    settings.sampling = {};
    for (const f of SAMPLING) $(f).value = '';
    saveSettings();
  });
  const thinking = $('thinking');
  thinking.checked = !!settings.thinking;
  thinking.addEventListener('change', () => {
    settings.thinking = thinking.checked;
    saveSettings();
  });
}

function setupComposer() {
  const input = $('input');
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = input.value;
    if (!text.trim() || streaming) return;
    input.value = '';
    send(text);
  });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => streaming && streaming.controller.abort());
  $('new-chat').addEventListener('click', () => {
    if (streaming) return;
    currentId = null;
    save();
    renderSidebar();
    renderMessages();
    document.body.classList.remove('sidebar-open');
    input.focus();
  });
  $('menu').addEventListener('click', () => {
    const open = document.body.classList.toggle('sidebar-open');
    $('menu').setAttribute('aria-expanded', String(open));
  });
}

setupKeyForm(loadModel);
setupSettings();
setupComposer();
renderSidebar();
renderMessages();
loadModel();
