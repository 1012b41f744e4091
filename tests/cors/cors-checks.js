// CORS in headless Chromium (tests/serve_cors.sh): a page loaded from
// ALLOWED (an origin the daemon's --cors-origin lists) calls the API with
// fetch — preflighted requests (JSON body, Authorization and X-Request-Id
// headers), a stream read to its end, an error answer — and reads every
// answer and the exposed X-Request-Id; a page from REFUSED (not listed)
// gets a TypeError from fetch for a preflighted call and for a simple GET,
// as browsers do when the answer does not allow the origin.
//
// Usage: node cors-checks.js BASE ALLOWED REFUSED
// Either may be "-" to skip its checks.
'use strict';
const assert = require('assert');
const { checks } = require('../serve/checks.js');
const { launch, openPage } = require('../webui/browser.js');

const [base, allowed, refused] = process.argv.slice(2);
const { check, finish } = checks();

// Runs in the page: one fetch, its status, headers and body, or the error's name.
async function call(page, path, init, readStream) {
  return page.evaluate(async (url, init, readStream) => {
    try {
      const res = await fetch(url, init);
      let body = '';
      if (readStream) {
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          body += dec.decode(value, { stream: true });
        }
      } else {
        body = await res.text();
      }
      return { status: res.status, requestId: res.headers.get('X-Request-Id'), body };
    } catch (e) {
      return { error: e.name, message: e.message };
    }
  }, base + path, init, readStream);
}

const json = (body, extra = {}) => ({
  method: 'POST',
  headers: { 'Content-Type': 'application/json', ...extra },
  body: JSON.stringify(body),
});

async function refusedChecks(page, label) {
  await check(`${label}: a preflighted POST is refused by the browser`, async () => {
    const r = await call(page, '/v1/completions', json({ prompt: 'hi', max_tokens: 2 }, { 'X-Request-Id': 'no-1' }));
    assert.strictEqual(r.error, 'TypeError', JSON.stringify(r));
  });
  await check(`${label}: a simple GET is refused by the browser`, async () => {
    const r = await call(page, '/v1/models', {});
    assert.strictEqual(r.error, 'TypeError', JSON.stringify(r));
  });
}

async function main() {
  const browser = await launch();
  try {
    if (allowed !== '-') {
      const page = await openPage(browser);
      await page.goto(allowed + '/', { waitUntil: 'load' });
      await check('allowed origin: a preflighted POST, its answer and X-Request-Id', async () => {
        const r = await call(page, '/v1/completions', json({ prompt: 'hello', max_tokens: 3 }, { 'X-Request-Id': 'cors-a.1' }));
        assert.strictEqual(r.status, 200, JSON.stringify(r));
        assert.strictEqual(r.requestId, 'cors-a.1');
        const j = JSON.parse(r.body);
        assert.strictEqual(j.object, 'text_completion');
        assert.strictEqual(j.usage.completion_tokens, 3);
      });
      await check('allowed origin: a chat stream read to [DONE]', async () => {
        const r = await call(page, '/v1/chat/completions',
          json({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true }), true);
        assert.strictEqual(r.status, 200, JSON.stringify(r));
        const events = r.body.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
        assert.strictEqual(events[events.length - 1], '[DONE]');
        const last = JSON.parse(events[events.length - 2]);
        assert.ok(['stop', 'length'].includes(last.choices[0].finish_reason), events.join('|'));
        assert.ok(/^chatcmpl-/.test(r.requestId), `X-Request-Id ${r.requestId}`);
      });
      await check('allowed origin: Authorization is allowed, and an error answer is readable', async () => {
        const r = await call(page, '/v1/completions',
          json({ prompt: 'hi', temperature: 'warm' }, { Authorization: 'Bearer unused' }));
        assert.strictEqual(r.status, 400, JSON.stringify(r));
        assert.strictEqual(JSON.parse(r.body).error.param, 'temperature');
      });
      await check('allowed origin: a simple GET', async () => {
        const r = await call(page, '/v1/models', {});
        assert.strictEqual(r.status, 200, JSON.stringify(r));
        assert.strictEqual(JSON.parse(r.body).object, 'list');
      });
      await page.close();
    }
    if (refused !== '-') {
      const page = await openPage(browser);
      await page.goto(refused + '/', { waitUntil: 'load' });
      await refusedChecks(page, `origin ${refused}`);
      await page.close();
    }
  } finally {
    await browser.close();
  }
  finish('cors-checks');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
