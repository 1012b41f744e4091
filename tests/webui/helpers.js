// Helpers of the web UI's browser tests and screenshot script: bounded
// waits, /metrics reads, the chat page's settings dialog, and a chat stream
// from the daemon whose text is replaced (the tiny test model's random
// weights never think or write Markdown, so the tests that need reasoning
// or hostile Markdown in an answer take a real stream and swap its text).
'use strict';
const http = require('http');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls FN until it returns a truthy value; throws WHAT after TIMEOUT_MS.
// A poll that throws counts as not yet (a page busy with a frame may fail
// one evaluate); the last such error is named if the time runs out.
async function waitFor(what, fn, timeoutMs = 60000, everyMs = 200) {
  const end = Date.now() + timeoutMs;
  let lastError = null;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > end)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${lastError.message})` : ''}`);
    await sleep(everyMs);
  }
}

// The value of a family of one series (its labels, model_name, aside) in /metrics, as a number.
async function metric(base, name) {
  const text = await (await fetch(base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  if (!line) throw new Error(`${name} is not in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

// Sets the chat page's settings through its dialog: VALUES maps a field's
// id (max_tokens, seed, system, ...) to its text; '' empties it.
async function setSettings(page, values) {
  await page.click('#settings-open');
  await page.waitForSelector('#settings[open]');
  for (const [id, v] of Object.entries(values)) {
    await page.$eval(`#${id}`, (e) => { e.value = ''; });
    if (v !== '') await page.type(`#${id}`, String(v));
    else await page.$eval(`#${id}`, (e) => e.dispatchEvent(new Event('input', { bubbles: true })));
  }
  await page.click('#settings-form button[type=submit]');
  await page.waitForSelector('#settings:not([open])');
}

// Types TEXT into the composer and sends it with Enter.
async function sendMessage(page, text) {
  await page.click('#input');
  await page.type('#input', text);
  await page.keyboard.press('Enter');
}

// The answers on the page: [{state, text, stats}] of the assistant messages.
function answers(page) {
  return page.$$eval('.msg.assistant', (ns) => ns.map((n) => ({
    state: n.dataset.state,
    text: n.querySelector('.md').textContent,
    stats: { ...n.querySelector('.stats').dataset },
  })));
}

// Serves the page's next POST /v1/chat/completions through the daemon at
// BASE, with the stream's text replaced by REASONING and CONTENT (in small
// deltas); ids, finish, usage and timings are the daemon's. Every other
// request goes through untouched. Resolves, once interception is on, with
// {answered}: a promise of the request's JSON body once it has been
// answered (interception is then off again); it rejects when no request
// has been answered within TIMEOUT_MS.
async function rewriteNextChat(page, base, reasoning, content, timeoutMs = 60000) {
  let settle;
  const answered = new Promise((resolve, reject) => { settle = { resolve, reject }; });
  // A page that never sends its request must fail the check, not hang it.
  const timer = setTimeout(() => settle.reject(new Error(`no chat request was rewritten within ${timeoutMs} ms`)),
    timeoutMs);
  let taken = false;
  const onRequest = async (req) => {
    if (taken || req.method() !== 'POST' || !req.url().endsWith('/v1/chat/completions')) {
      req.continue();
      return;
    }
    taken = true;
    try {
      const body = req.postData();
      const res = await fetch(base + '/v1/chat/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json', ...authOf(req) }, body,
      });
      const chunks = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
      const json = chunks.map((c) => (c === '[DONE]' ? null : JSON.parse(c)));
      const template = json.find((j) => j && j.choices && j.choices[0] && j.choices[0].delta);
      if (!res.ok || !template) throw new Error(`the daemon answered ${res.status} with no delta: ${chunks.join(' | ')}`);
      const piece = (key, text) => {
        const j = structuredClone(template);
        j.choices[0].delta = { [key]: text };
        j.choices[0].finish_reason = null;
        return JSON.stringify(j);
      };
      const out = [chunks[0]];
      for (const [key, text] of [['reasoning_content', reasoning], ['content', content]])
        for (let i = 0; i < text.length; i += 12) out.push(piece(key, text.slice(i, i + 12)));
      // The final chunk (finish_reason, timings), the usage chunk and [DONE].
      json.forEach((j, k) => {
        if (k > 0 && (!j || !j.choices.length || j.choices[0].finish_reason)) out.push(chunks[k]);
      });
      await req.respond({ status: 200, contentType: 'text/event-stream', body: out.map((c) => `data: ${c}\n\n`).join('') });
      settle.resolve(JSON.parse(body));
    } catch (e) {
      settle.reject(e);
      req.abort().catch(() => {});
    }
  };
  page.on('request', onRequest);
  await page.setRequestInterception(true);
  const done = answered.finally(async () => {
    clearTimeout(timer);
    page.off('request', onRequest);
    await page.setRequestInterception(false);
  });
  return { answered: done };
}

function authOf(req) {
  const h = req.headers().authorization;
  return h ? { Authorization: h } : {};
}

// A pass-through proxy to the daemon at BASE, so that a test can hold a
// stream open: the tiny model answers within one animation frame, and a page
// that renders once per frame may get the whole stream before it draws.
// After hold(), the next /v1/chat/completions stream is passed on up to the
// end of its first SSE event with non-empty content text (a whole event, so
// the page can show it), and the rest waits for release(). A release() before
// that event came cancels the hold, so no stream stays held after the check
// that asked for it. trace() tells what the held stream went through, with
// times since hold(), for a failing check's message.
// Resolves with {url, hold, release, trace, close}; serve pages from url.
function holdingProxy(base) {
  const target = new URL(base);
  let pending = null; // the hold asked for: {active, taken, t0, events}
  let releaseHeld = null;
  const note = (h, what) => h.events.push(`${what} at ${Date.now() - h.t0} ms`);
  const server = http.createServer((req, res) => {
    const headers = { ...req.headers };
    delete headers.connection;
    const isChat = req.method === 'POST' && req.url.endsWith('/v1/chat/completions');
    const hold = isChat && pending && pending.active && !pending.taken ? pending : null;
    if (hold) {
      hold.taken = true;
      note(hold, 'request');
    }
    const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
      (ur) => {
        const h = { ...ur.headers };
        delete h.connection;
        delete h['keep-alive'];
        res.writeHead(ur.statusCode, h);
        res.flushHeaders();
        if (hold) note(hold, `response ${ur.statusCode}`);
        let scan = hold ? Buffer.alloc(0) : null; // bytes not yet passed on while looking for the event
        let held = null; // chunks after that event, once holding
        let ended = false;
        ur.on('data', (chunk) => {
          if (held) {
            held.push(chunk);
            return;
          }
          if (!scan) {
            res.write(chunk);
            return;
          }
          scan = Buffer.concat([scan, chunk]);
          for (let k; (k = scan.indexOf('\n\n')) >= 0;) {
            const event = scan.subarray(0, k + 2);
            scan = scan.subarray(k + 2);
            res.write(event);
            if (!hold.active) {
              // released before any content: pass the rest on
              res.write(scan);
              scan = null;
              return;
            }
            if (/"content":\s*"(?:[^"\\]|\\.)/.test(event.toString('utf8'))) {
              note(hold, 'first content held');
              held = scan.length ? [scan] : [];
              scan = null;
              releaseHeld = () => {
                note(hold, 'released');
                for (const c of held) res.write(c);
                held = null;
                if (ended) res.end();
              };
              return;
            }
          }
        });
        ur.on('end', () => {
          ended = true;
          if (hold) note(hold, 'daemon ended the stream');
          if (scan && scan.length) res.write(scan);
          if (!held) res.end();
        });
        ur.on('error', () => res.destroy());
      });
    up.on('error', () => res.destroy());
    // A page that stops reading (its stop button) must close the daemon's side too.
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${server.address().port}`,
    hold: () => {
      if (pending) pending.active = false;
      pending = { active: true, taken: false, t0: Date.now(), events: [] };
    },
    release: () => {
      if (pending && pending.active) {
        pending.active = false;
        if (!releaseHeld) note(pending, 'released before any content');
      }
      const r = releaseHeld;
      releaseHeld = null;
      if (r) r();
      return !!r;
    },
    trace: () => (pending ? pending.events.join(', ') || 'no chat request came' : 'no hold'),
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  })));
}

module.exports = { sleep, waitFor, metric, setSettings, sendMessage, answers, rewriteNextChat, holdingProxy };
