// Black-box checks of a running `qwen3d serve` over plain HTTP (Node's fetch):
// streaming and non-streaming give the same greedy text, token-id prompts
// equal text prompts, stop strings, concurrent streams equal single runs and
// interleave, the documented error statuses and bodies, `timings` printed
// to three decimals with ttft_ms >= queue_ms + prompt_ms, and /metrics
// counters and latency sums that match what the requests reported.
//
// usage: node http-checks.js BASE_URL MODEL_NAME PROMPT_IDS_JSON
'use strict';
const assert = require('assert');
const { parseMetrics } = require('./metrics-parse.js');

// stallFile (optional): the daemon's QWEN3D_TEST_STALL file (tests/serve/qwen3d-hooks).
const [base, model, idsJson, stallFile] = process.argv.slice(2);
const helloIds = JSON.parse(idsJson);
const { check, finish } = require('./checks.js').checks();

// The `timings` object of a response or chunk, as raw JSON text: at most
// three decimals per value, and TTFT, timed from the request's arrival,
// holds the queue wait and the prefill (and the tokenization before them).
const timingsSeen = { n: 0 };
function checkTimings(raw) {
  const m = /"timings":(\{[^}]*\})/.exec(raw);
  if (!m) return;
  for (const [, k, v] of m[1].matchAll(/"(\w+)":(-?[0-9.eE+-]+)/g))
    assert.match(v, /^\d+(\.\d{1,3})?$/, `timings.${k} printed as ${v}`);
  const t = JSON.parse(m[1]);
  assert.deepStrictEqual(Object.keys(t), ['queue_ms', 'prompt_ms', 'ttft_ms', 'decode_tokens_per_s', 'tpot_ms']);
  // Each value is rounded to 0.001 on its own.
  assert.ok(t.ttft_ms + 0.002 >= t.queue_ms + t.prompt_ms, `ttft_ms < queue_ms + prompt_ms: ${m[1]}`);
  // One choice: tpot_ms is the decode time over the tokens after the first,
  // decode_tokens_per_s those tokens over that time (0 both below 2 tokens).
  assert.strictEqual(t.tpot_ms === 0, t.decode_tokens_per_s === 0, `tpot_ms and decode_tokens_per_s: ${m[1]}`);
  if (t.tpot_ms >= 0.1)
    assert.ok(Math.abs(t.tpot_ms * t.decode_tokens_per_s / 1000 - 1) < 0.01, `tpot_ms is not 1000 / decode_tokens_per_s: ${m[1]}`);
  timingsSeen.n++;
}

async function post(path, body, headers = {}) {
  const r = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(30000),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  if (r.status === 200) checkTimings(text);
  return { status: r.status, headers: r.headers, text, json };
}

// Reads an SSE response: every `data:` payload in order, with arrival times.
// onHeaders (optional) is called once the response headers are in: the daemon has taken the request in.
async function stream(path, body, onHeaders) {
  const r = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
    signal: AbortSignal.timeout(30000),
  });
  if (onHeaders) onHeaders();
  assert.strictEqual(r.status, 200, `stream status ${r.status}`);
  assert.match(r.headers.get('content-type') || '', /^text\/event-stream/);
  const dec = new TextDecoder();
  let buf = '';
  const events = [];
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      assert.ok(ev.startsWith('data: '), `event not a data line: ${JSON.stringify(ev)}`);
      events.push({ t: performance.now(), data: ev.slice(6) });
      checkTimings(ev);
    }
  }
  assert.strictEqual(buf, '', 'bytes after the last event');
  assert.ok(events.length >= 2, 'at least one chunk and [DONE]');
  assert.strictEqual(events[events.length - 1].data, '[DONE]', 'the stream ends with [DONE]');
  const chunks = events.slice(0, -1).map((e) => ({ t: e.t, j: JSON.parse(e.data) }));
  return chunks;
}

function streamedCompletion(chunks) {
  let text = '', finish = null, usage = null;
  for (const { j } of chunks) {
    if (j.usage) usage = j.usage;
    if (!j.choices.length) continue;
    text += j.choices[0].text;
    if (j.choices[0].finish_reason) finish = j.choices[0].finish_reason;
  }
  return { text, finish, usage };
}

function streamedChat(chunks) {
  let content = '', reasoning = '', finish = null, usage = null, role = null, sawReasoning = false;
  for (const { j } of chunks) {
    assert.strictEqual(j.object, 'chat.completion.chunk');
    if (j.usage) usage = j.usage;
    if (!j.choices.length) continue;
    const d = j.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) content += d.content;
    if (d.reasoning_content !== undefined) { reasoning += d.reasoning_content; sawReasoning = true; }
    if (j.choices[0].finish_reason) finish = j.choices[0].finish_reason;
  }
  return { content, reasoning: sawReasoning ? reasoning : undefined, finish, usage, role };
}

async function scrape() {
  const r = await fetch(base + '/metrics');
  assert.strictEqual(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  return parseMetrics(await r.text());
}

// Code points, so a cut never splits a character.
function cps(s) { return Array.from(s); }

const prompts = ['Hello world', 'The quick brown fox', 'Once upon a time,', '1, 2, 3, 4,'];
const usageTotals = { prompt: 0, completion: 0, requests200: 0, firstTokens: 0 };
function count(u) {
  usageTotals.prompt += u.prompt_tokens;
  usageTotals.completion += u.completion_tokens;
  usageTotals.requests200++;
  if (u.completion_tokens > 0) usageTotals.firstTokens++;
}

(async () => {
  const m0 = await scrape();
  const singles = {};

  await check('completions: streaming equals non-streaming (greedy), usage and timings present', async () => {
    for (const p of prompts) {
      const body = { model, prompt: p, max_tokens: 24, temperature: 0 };
      const a = await post('/v1/completions', body);
      assert.strictEqual(a.status, 200, a.text);
      const j = a.json;
      assert.strictEqual(j.object, 'text_completion');
      assert.strictEqual(j.model, model);
      assert.match(j.id, /^cmpl-/);
      assert.strictEqual(j.choices.length, 1);
      assert.ok(['stop', 'length'].includes(j.choices[0].finish_reason));
      assert.strictEqual(j.usage.total_tokens, j.usage.prompt_tokens + j.usage.completion_tokens);
      for (const k of ['queue_ms', 'prompt_ms', 'ttft_ms', 'decode_tokens_per_s', 'tpot_ms'])
        assert.strictEqual(typeof j.timings[k], 'number', `timings.${k}`);
      count(j.usage);
      singles[p] = j.choices[0].text;
      const s = streamedCompletion(await stream('/v1/completions', { ...body, stream_options: { include_usage: true } }));
      assert.strictEqual(s.text, j.choices[0].text, `prompt ${JSON.stringify(p)}`);
      assert.strictEqual(s.finish, j.choices[0].finish_reason);
      assert.deepStrictEqual(s.usage, j.usage);
      count(s.usage);
    }
  });

  await check('completions: a prompt of token ids equals the same prompt as text', async () => {
    const a = await post('/v1/completions', { model, prompt: 'Hello world', max_tokens: 12, temperature: 0 });
    const b = await post('/v1/completions', { model, prompt: helloIds, max_tokens: 12, temperature: 0 });
    assert.strictEqual(b.status, 200, b.text);
    assert.strictEqual(b.json.usage.prompt_tokens, helloIds.length);
    assert.strictEqual(b.json.choices[0].text, a.json.choices[0].text);
    count(a.json.usage);
    count(b.json.usage);
  });

  await check('completions: stop strings end the text before the stop string, streaming or not', async () => {
    const full = await post('/v1/completions', { model, prompt: 'Once upon a time,', max_tokens: 40, temperature: 0 });
    count(full.json.usage);
    const chars = cps(full.json.choices[0].text);
    assert.ok(chars.length >= 8, 'enough text to cut');
    const stop = chars.slice(4, 6).join('');
    const expect = full.json.choices[0].text.slice(0, full.json.choices[0].text.indexOf(stop));
    const body = { model, prompt: 'Once upon a time,', max_tokens: 40, temperature: 0, stop: [stop, 'never-in-this-text-#@!'] };
    const a = await post('/v1/completions', body);
    assert.strictEqual(a.status, 200, a.text);
    assert.strictEqual(a.json.choices[0].text, expect);
    assert.strictEqual(a.json.choices[0].finish_reason, 'stop');
    count(a.json.usage);
    const s = streamedCompletion(await stream('/v1/completions', { ...body, stream_options: { include_usage: true } }));
    assert.strictEqual(s.text, expect);
    assert.strictEqual(s.finish, 'stop');
    count(s.usage);
  });

  await check('completions: seeded sampling is reproducible, streaming or not', async () => {
    const body = { model, prompt: 'Hello world', max_tokens: 16, temperature: 0.9, top_p: 0.95, top_k: 50, seed: 1234 };
    const a = await post('/v1/completions', body);
    const b = await post('/v1/completions', body);
    assert.strictEqual(a.json.choices[0].text, b.json.choices[0].text);
    const s = streamedCompletion(await stream('/v1/completions', { ...body, stream_options: { include_usage: true } }));
    assert.strictEqual(s.text, a.json.choices[0].text);
    count(a.json.usage);
    count(b.json.usage);
    count(s.usage);
  });

  await check('chat: streaming equals non-streaming, with and without thinking', async () => {
    for (const thinking of [false, true]) {
      const body = {
        model,
        messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a color.' }],
        max_tokens: 20, temperature: 0, chat_template_kwargs: { enable_thinking: thinking },
      };
      const a = await post('/v1/chat/completions', body);
      assert.strictEqual(a.status, 200, a.text);
      const j = a.json;
      assert.strictEqual(j.object, 'chat.completion');
      assert.match(j.id, /^chatcmpl-/);
      assert.strictEqual(j.choices[0].message.role, 'assistant');
      assert.strictEqual(typeof j.choices[0].message.content, 'string');
      count(j.usage);
      const s = streamedChat(await stream('/v1/chat/completions', { ...body, stream_options: { include_usage: true } }));
      assert.strictEqual(s.role, 'assistant');
      assert.strictEqual(s.content, j.choices[0].message.content, `thinking=${thinking}`);
      assert.strictEqual(s.reasoning, j.choices[0].message.reasoning_content);
      assert.strictEqual(s.finish, j.choices[0].finish_reason);
      assert.deepStrictEqual(s.usage, j.usage);
      count(s.usage);
    }
  });

  await check('chat: thinking on and off render different prompts', async () => {
    const msgs = [{ role: 'user', content: 'Hi' }];
    const on = await post('/v1/chat/completions', { model, messages: msgs, max_tokens: 1, temperature: 0 });
    const off = await post('/v1/chat/completions', {
      model, messages: msgs, max_tokens: 1, temperature: 0, chat_template_kwargs: { enable_thinking: false },
    });
    // "<think>\n\n</think>\n\n" is 4 more tokens in the Qwen3 tokenizer.
    assert.strictEqual(off.json.usage.prompt_tokens, on.json.usage.prompt_tokens + 4);
    count(on.json.usage);
    count(off.json.usage);
  });

  await check('concurrency: 4 streams at once equal their single runs, and streams interleave', async () => {
    // The steps are held until all four requests have arrived (their
    // response headers are in): on a fast machine the tiny model could
    // otherwise finish the first before the second is sent, and they would
    // not share a step.
    if (stallFile) require('fs').writeFileSync(stallFile, '0');
    let arrived = 0, allIn;
    const inAll = new Promise((res) => { allIn = res; });
    const pending = Promise.all(prompts.map((p) =>
      stream('/v1/completions', { model, prompt: p, max_tokens: 24, temperature: 0, stream_options: { include_usage: true } },
        () => { if (++arrived === prompts.length) allIn(); })));
    if (stallFile) {
      await Promise.race([inAll, pending]); // a failed request ends the wait too
      require('fs').rmSync(stallFile, { force: true });
    }
    const runs = await pending;
    runs.forEach((chunks, i) => {
      const s = streamedCompletion(chunks);
      assert.strictEqual(s.text, singles[prompts[i]], `stream ${i}`);
      count(s.usage);
    });
    // Round-robin: the two streams admitted first alternate decode steps, so
    // neither ends before the other has started.
    const first = (c) => c.find((x) => x.j.choices.length && x.j.choices[0].text).t;
    const last = (c) => c[c.length - 1].t;
    const [a, b] = runs.slice().sort((x, y) => first(x) - first(y));
    assert.ok(first(b) < last(a), 'the first two streams interleave');
  });

  await check('GET /v1/models and /health', async () => {
    const r = await fetch(base + '/v1/models');
    const j = await r.json();
    assert.strictEqual(j.object, 'list');
    assert.strictEqual(j.data[0].id, model);
    assert.strictEqual(j.data[0].object, 'model');
    const h = await fetch(base + '/health');
    assert.strictEqual(h.status, 200);
    assert.deepStrictEqual(await h.json(), { status: 'ok' });
  });

  const errorCases = [
    ['malformed JSON', '/v1/completions', '{"prompt": ', 400, 'invalid_request_error', 'invalid_json', null],
    ['body not an object', '/v1/completions', '[1,2]', 400, 'invalid_request_error', 'invalid_json', null],
    ['prompt of the wrong type', '/v1/completions', { prompt: 12 }, 400, 'invalid_request_error', 'invalid_type', 'prompt'],
    ['missing prompt', '/v1/completions', { model }, 400, 'invalid_request_error', 'missing_required_parameter', 'prompt'],
    ['empty prompt', '/v1/completions', { prompt: '' }, 400, 'invalid_request_error', 'invalid_prompt', 'prompt'],
    ['token id outside the vocabulary', '/v1/completions', { prompt: [1, 2, 99999999] }, 400, 'invalid_request_error', 'invalid_prompt', 'prompt[2]'],
    ['unknown model', '/v1/completions', { model: 'gpt-4', prompt: 'x' }, 404, 'invalid_request_error', 'model_not_found', 'model'],
    ['n above --parallel', '/v1/completions', { prompt: 'x', n: 3 }, 400, 'invalid_request_error', 'invalid_value', 'n'],
    ['temperature out of range', '/v1/completions', { prompt: 'x', temperature: 2.5 }, 400, 'invalid_request_error', 'invalid_value', 'temperature'],
    ['top_p out of range', '/v1/completions', { prompt: 'x', top_p: 1.5 }, 400, 'invalid_request_error', 'invalid_value', 'top_p'],
    ['min_p out of range', '/v1/completions', { prompt: 'x', min_p: -0.1 }, 400, 'invalid_request_error', 'invalid_value', 'min_p'],
    ['top_k of the wrong type', '/v1/completions', { prompt: 'x', top_k: 'ten' }, 400, 'invalid_request_error', 'invalid_type', 'top_k'],
    ['presence_penalty out of range', '/v1/completions', { prompt: 'x', presence_penalty: 3 }, 400, 'invalid_request_error', 'invalid_value', 'presence_penalty'],
    ['max_tokens zero', '/v1/completions', { prompt: 'x', max_tokens: 0 }, 400, 'invalid_request_error', 'invalid_value', 'max_tokens'],
    ['max_tokens past the context', '/v1/completions', { prompt: 'x', max_tokens: 1000 }, 400, 'invalid_request_error', 'context_length_exceeded', 'max_tokens'],
    ['prompt longer than the context', '/v1/completions', { prompt: Array(600).fill(9707) }, 400, 'invalid_request_error', 'context_length_exceeded', 'prompt'],
    ['stream of the wrong type', '/v1/completions', { prompt: 'x', stream: 'yes' }, 400, 'invalid_request_error', 'invalid_type', 'stream'],
    ['stop of the wrong type', '/v1/completions', { prompt: 'x', stop: 5 }, 400, 'invalid_request_error', 'invalid_type', 'stop'],
    ['messages missing', '/v1/chat/completions', { model }, 400, 'invalid_request_error', 'missing_required_parameter', 'messages'],
    ['messages empty', '/v1/chat/completions', { messages: [] }, 400, 'invalid_request_error', 'invalid_value', 'messages'],
    ['unknown role', '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }, 400, 'invalid_request_error', 'unsupported_value', 'messages[0].role'],
    ['content of the wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 5 }] }, 400, 'invalid_request_error', 'invalid_type', 'messages[0].content'],
    ['enable_thinking of the wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { enable_thinking: 'no' } }, 400, 'invalid_request_error', 'invalid_type', 'chat_template_kwargs.enable_thinking'],
  ];
  for (const [name, path, body, status, type, code, param] of errorCases) {
    await check(`error: ${name} -> ${status} ${code}`, async () => {
      const r = await post(path, body);
      assert.strictEqual(r.status, status, r.text);
      assert.match(r.headers.get('content-type'), /^application\/json/);
      assert.deepStrictEqual(Object.keys(r.json), ['error']);
      const e = r.json.error;
      assert.deepStrictEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
      assert.strictEqual(e.type, type);
      assert.strictEqual(e.code, code);
      assert.strictEqual(e.param, param);
      assert.ok(typeof e.message === 'string' && e.message.length > 0);
    });
  }

  await check('metrics: counters match exactly what the requests reported', async () => {
    const m1 = await scrape();
    const d = (name, labels) => m1.value(name, labels) - m0.value(name, labels);
    assert.strictEqual(d('qwen3d_prompt_tokens_total'), usageTotals.prompt);
    assert.strictEqual(d('qwen3d_generation_tokens_total'), usageTotals.completion);
    const ok = d('qwen3d_requests_total', { endpoint: '/v1/completions', code: '200' }) +
      d('qwen3d_requests_total', { endpoint: '/v1/chat/completions', code: '200' });
    assert.strictEqual(ok, usageTotals.requests200);
    assert.strictEqual(d('qwen3d_time_to_first_token_seconds_count'), usageTotals.firstTokens);
    assert.strictEqual(d('qwen3d_request_duration_seconds_count'),
      usageTotals.requests200 + errorCases.length);
    assert.strictEqual(d('qwen3d_inter_token_latency_seconds_count'), usageTotals.completion - usageTotals.firstTokens);
    assert.strictEqual(d('qwen3d_queue_wait_seconds_count'), usageTotals.requests200);
    // TTFT, timed from each request's arrival, is the time before the queue
    // (parsing, tokenization) plus the queue wait plus the prefill, one
    // observation each per request; the request's duration holds its TTFT.
    assert.strictEqual(d('qwen3d_prefill_seconds_count'), usageTotals.firstTokens);
    const ttft = d('qwen3d_time_to_first_token_seconds_sum'), queue = d('qwen3d_queue_wait_seconds_sum');
    const prefill = d('qwen3d_prefill_seconds_sum'), duration = d('qwen3d_request_duration_seconds_sum');
    assert.ok(ttft > queue + prefill, `TTFT sum ${ttft} <= queue ${queue} + prefill ${prefill}`);
    assert.ok(duration >= ttft, `request duration sum ${duration} < TTFT sum ${ttft}`);
    assert.ok(timingsSeen.n >= usageTotals.requests200, `timings checked ${timingsSeen.n} times`);
    assert.strictEqual(m1.value('qwen3d_sessions_active'), 0);
    assert.strictEqual(m1.value('qwen3d_requests_waiting'), 0);
    assert.strictEqual(m1.value('qwen3d_kv_cache_bytes'), 0);
    assert.ok(m1.value('qwen3d_model_weight_bytes') > 0);
    assert.ok(m1.value('qwen3d_model_load_seconds') > 0);
    assert.ok(m1.value('process_resident_memory_bytes') > 0);
    assert.ok(m1.value('process_start_time_seconds') > 1e9);
    assert.strictEqual(m1.value('qwen3d_build_info', null, true), 1);
  });

  finish('http-checks');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
