// The pages against a daemon started with --api-key-file
// (tests/serve_webui.sh): they load without the key, ask for it when an
// API call is refused, and every API call then carries it.
//
// Usage: node webui-auth.js BASE KEY
'use strict';
const assert = require('assert');
const { checks } = require('../serve/checks.js');
const { launch, openPage } = require('./browser.js');
const { setSettings, sendMessage, answers } = require('./helpers.js');

const [base, key] = process.argv.slice(2);
const runner = checks();
const { finish } = runner;
// Each check's name as it starts, so a log shows where a hang is.
const check = (name, fn) => {
  console.error(`# ${name}`);
  return runner.check(name, fn);
};
const LONG = 120000;

// Every API request the page makes: {path, auth}.
function watchApi(page) {
  const seen = [];
  page.on('request', (r) => {
    const path = new URL(r.url()).pathname;
    if (path.startsWith('/v1/') || path === '/status.json') seen.push({ path, auth: r.headers().authorization || null });
  });
  return seen;
}

async function main() {
  const browser = await launch();
  const page = await openPage(browser);
  const calls = watchApi(page);

  await check('the chat page loads without a key and asks for one', async () => {
    const res = await page.goto(base + '/', { waitUntil: 'networkidle0' });
    assert.strictEqual(res.status(), 200);
    await page.waitForSelector('#key-form:not([hidden])', { timeout: LONG });
    assert.deepStrictEqual(calls, [{ path: '/v1/models', auth: null }]);
  });

  await check('a message without the key is refused', async () => {
    await setSettings(page, { max_tokens: 8 });
    await sendMessage(page, 'Hello?');
    await page.waitForFunction(() => document.querySelector('.msg.assistant')?.dataset.state === 'error', { timeout: LONG });
    const err = await page.$eval('.msg.assistant .error', (e) => e.textContent);
    assert.match(err, /^401/);
  });

  await check('with the key typed in, the message goes through, and every call carries it', async () => {
    const from = calls.length;
    await page.type('#key-input', key);
    await page.click('#key-form button[type=submit]');
    await page.waitForFunction(() => /tiny/.test(document.getElementById('model').textContent), { timeout: LONG });
    await sendMessage(page, 'Hello again.');
    await page.waitForFunction(() => {
      const ns = document.querySelectorAll('.msg.assistant');
      return ns.length === 2 && ns[1].dataset.state === 'done';
    }, { timeout: LONG });
    const a = (await answers(page))[1];
    assert.strictEqual(a.stats.completionTokens, '8');
    const after = calls.slice(from);
    assert.deepStrictEqual(after.map((c) => c.path), ['/v1/models', '/v1/chat/completions']);
    for (const c of after) assert.strictEqual(c.auth, 'Bearer ' + key, JSON.stringify(c));
  });

  await check('the status page takes the stored key; without it, it asks', async () => {
    const status = await openPage(browser);
    const seen = watchApi(status);
    await status.goto(base + '/status', { waitUntil: 'networkidle0' });
    await status.waitForFunction(() => /tiny/.test(document.getElementById('model-info').textContent), { timeout: LONG });
    assert.strictEqual(seen[0].auth, 'Bearer ' + key);
    await status.evaluate(() => localStorage.removeItem('qwen3d.apiKey'));
    await status.reload({ waitUntil: 'networkidle0' });
    await status.waitForSelector('#key-form:not([hidden])', { timeout: LONG });
    assert.strictEqual(await status.$eval('#model-info', (d) => d.textContent), '');
    await status.type('#key-input', key);
    await status.click('#key-form button[type=submit]');
    await status.waitForFunction(() => /tiny/.test(document.getElementById('model-info').textContent), { timeout: LONG });
    assert.deepStrictEqual(status.problems.filter((p) => !/401/.test(p)), []);
    assert.deepStrictEqual(await status.evaluate(() => window.__cspViolations), []);
  });

  await check('no console errors other than the refused calls, no CSP violations', async () => {
    assert.deepStrictEqual(page.problems.filter((p) => !/401/.test(p)), []);
    assert.deepStrictEqual(await page.evaluate(() => window.__cspViolations), []);
  });

  await browser.close();
  finish('webui-auth');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
