// The chat and status pages in headless Chromium, against a daemon on the
// tiny model started with --log-prompts (tests/serve_webui.sh). Every wait
// is for a condition, bounded generously; nothing is timed.
//
// Usage: node webui-checks.js BASE DAEMON_LOG
'use strict';
const assert = require('assert');
const fs = require('fs');
const { checks } = require('../serve/checks.js');
const { launch, openPage } = require('./browser.js');
const { sleep, waitFor, metric, setSettings, sendMessage, answers, rewriteNextChat, holdingProxy } = require('./helpers.js');

const [base, logPath] = process.argv.slice(2);
const runner = checks();
const { finish } = runner;
const LONG = 120000;
// Set in main(): the chat page and the proxy it talks through.
let chatPage = null, front = null;

// Each check's name as it starts, so a log shows where a hang is. A check
// begins with no stream held and the chat page idle: an answer a failed
// check left running is stopped, so that failure stays its own.
const check = (name, fn) => {
  console.error(`# ${name}`);
  return runner.check(name, async () => {
    if (front) front.release();
    if (chatPage && !chatPage.isClosed()) {
      // Polled on a timer: the chat page may be behind the status page, with no animation frames.
      const idle = () => chatPage.waitForFunction(() => !document.body.classList.contains('busy'),
        { timeout: 10000, polling: 200 });
      await idle().catch(async () => {
        console.error('# the chat page was still answering: stopped');
        await chatPage.click('#stop');
        await idle();
      });
    }
    await fn();
  });
};

// The prompt the daemon logged (--log-prompts) for the request with ID.
function loggedPrompt(id) {
  const line = fs.readFileSync(logPath, 'utf8').split('\n').find((l) => l.includes('event=prompt_text') && l.includes(`id=${id} `));
  assert.ok(line, `no prompt_text line for ${id} in the daemon's log`);
  return line.slice(line.indexOf(' text=') + 6);
}

// The X-Request-Id of each /v1/chat/completions response the page gets, in order.
function watchChatIds(page) {
  const ids = [];
  page.on('response', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) ids.push(r.headers()['x-request-id']);
  });
  return ids;
}

// Records in the page whether the last answer showed text while still streaming.
function watchPartial(page) {
  return page.evaluate(() => {
    window.__partial = null;
    const obs = new MutationObserver(() => {
      const ns = document.querySelectorAll('.msg.assistant');
      const n = ns[ns.length - 1];
      if (n && n.dataset.state === 'streaming' && n.querySelector('.md').textContent.length > 0 && window.__partial === null) {
        window.__partial = n.querySelector('.md').textContent;
        obs.disconnect();
      }
    });
    obs.observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true, attributes: true });
  });
}

const lastAnswer = async (page) => (await answers(page)).at(-1);
const stored = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('qwen3d.conversations') || '[]'));

async function waitAnswer(page, states, count) {
  await page.waitForFunction((st, n) => {
    const ns = document.querySelectorAll('.msg.assistant');
    return ns.length >= n && st.includes(ns[ns.length - 1].dataset.state);
  }, { timeout: LONG }, states, count);
  return lastAnswer(page);
}

async function main() {
  // The chat pages load through a proxy that can hold a stream open (holdingProxy).
  front = await holdingProxy(base);
  const browser = await launch();
  const page = await openPage(browser);
  chatPage = page;
  const chatIds = watchChatIds(page);
  let docHeaders = null;
  page.on('response', (r) => {
    if (r.url() === front.url + '/') docHeaders = r.headers();
  });

  await check('the chat page loads under its Content-Security-Policy', async () => {
    await page.goto(front.url + '/', { waitUntil: 'networkidle0' });
    const csp = docHeaders && docHeaders['content-security-policy'];
    assert.ok(csp, 'no Content-Security-Policy header on GET /');
    for (const d of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'",
      "require-trusted-types-for 'script'"])
      assert.ok(csp.includes(d), `the policy lacks ${d}: ${csp}`);
    assert.ok(!/unsafe-inline|unsafe-eval|https?:/.test(csp), `the policy allows too much: ${csp}`);
    await page.waitForFunction(() => /tiny/.test(document.getElementById('model').textContent), { timeout: LONG });
  });

  await check('while the model loads, the page asks /v1/models again', async () => {
    // The daemon answers max_model_len 0 until the model is loaded: the
    // first answer is made so here, the next ones are the daemon's.
    const p = await openPage(browser);
    let asked = 0;
    p.on('request', (req) => {
      if (!req.url().endsWith('/v1/models')) return req.continue();
      if (asked++) return req.continue();
      return req.respond({ status: 200, contentType: 'application/json',
        body: JSON.stringify({ object: 'list', data: [{ id: 'tiny', object: 'model', created: 0, owned_by: 'qwen3d', max_model_len: 0 }] }) });
    });
    try {
      await p.setRequestInterception(true);
      await p.goto(front.url + '/', { waitUntil: 'networkidle0' });
      await p.waitForFunction(() => /tokens of context/.test(document.getElementById('model').textContent), { timeout: LONG });
      assert.ok(asked >= 2, `asked ${asked} times`);
    } finally {
      // A page in the background gets no animation frames: the chat page must be in front again.
      await p.close();
      await page.bringToFront();
    }
  });

  await check('the policy is enforced: an injected inline script does not run', async () => {
    const r = await page.evaluate(() => {
      let thrown = '';
      try {
        const s = document.createElement('script');
        s.textContent = 'window.__inline = 1';
        document.body.append(s);
      } catch (e) {
        thrown = String(e);
      }
      return { ran: window.__inline === 1, thrown };
    });
    assert.strictEqual(r.ran, false, 'an inline script ran');
    await waitFor('a CSP violation report', () => page.evaluate(() => window.__cspViolations.length > 0 || null), 10000)
      .catch(() => assert.ok(r.thrown, 'neither a violation nor a Trusted Types error'));
    await page.evaluate(() => { window.__cspViolations = []; });
    page.problems.length = 0;
  });

  await check('a message streams: text shows before the answer ends', async () => {
    await setSettings(page, { max_tokens: 40, seed: 11 });
    await watchPartial(page);
    // The rest of the stream waits after its first text, so the page has frames to draw in.
    front.hold();
    await sendMessage(page, 'Tell me about streams.');
    let waited = '';
    const partial = await waitFor('text shown while the answer streams',
      () => page.evaluate(() => window.__partial), LONG).catch((e) => { waited = ` (${e.message})`; return null; });
    const released = front.release();
    console.error(`# the held stream: ${front.trace()}`);
    assert.ok(released, `the stream had no content text to hold after: ${front.trace()}`);
    assert.ok(partial && partial.length > 0, `no text was shown while the answer streamed${waited}: ${front.trace()}`);
    const a = await waitAnswer(page, ['done'], 1);
    assert.ok(a.text.length >= partial.length, 'the final text is shorter than a partial one');
    assert.strictEqual(a.stats.completionTokens, '40', `stats: ${JSON.stringify(a.stats)}`);
    assert.ok(Number(a.stats.promptTokens) > 0 && Number(a.stats.ttftMs) > 0 && Number(a.stats.decodeTokensPerS) > 0,
      `the figures under the answer: ${JSON.stringify(a.stats)}`);
  });

  await check('the streamed answer equals the same request answered whole', async () => {
    const conv = (await stored(page))[0];
    const answer = conv.messages[1];
    const res = await fetch(base + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me about streams.' }], max_tokens: 40, seed: 11 }),
    });
    const msg = (await res.json()).choices[0].message;
    assert.strictEqual(answer.content, msg.content);
    assert.strictEqual(answer.reasoning || '', msg.reasoning_content || '');
  });

  await check('stop ends the generation: qwen3d_sessions_active returns to 0', async () => {
    await setSettings(page, { max_tokens: 30000, seed: '' });
    await watchPartial(page);
    await sendMessage(page, 'Go on for a long time.');
    await page.waitForFunction(() => window.__partial !== null, { timeout: LONG });
    assert.strictEqual(await metric(base, 'qwen3d_sessions_active'), 1, 'the generation is not running');
    await page.click('#stop');
    const a = await waitAnswer(page, ['stopped'], 2);
    assert.ok(a.text.length > 0);
    await waitFor('qwen3d_sessions_active to return to 0', async () => (await metric(base, 'qwen3d_sessions_active')) === 0);
    const id = chatIds.at(-1);
    await waitFor(`the request line of ${id}`, () => fs.readFileSync(logPath, 'utf8').includes(`event=request id=${id} `));
    const line = fs.readFileSync(logPath, 'utf8').split('\n').find((l) => l.includes(`event=request id=${id} `));
    assert.match(line, /completed=0 .*finish=cancelled/, line);
    const generated = Number(/completion_tokens=(\d+)/.exec(line)[1]);
    assert.ok(generated < 30000, line);
    assert.ok(await page.$eval('#send', (b) => !b.hidden), 'Send is not back');
  });

  await check('the thinking toggle changes the rendered prompt', async () => {
    await setSettings(page, { max_tokens: 4, seed: 3 });
    const prompts = [], sent = [];
    for (const on of [true, false]) {
      await page.click('#new-chat');
      if ((await page.$eval('#thinking', (c) => c.checked)) !== on) await page.click('#thinking');
      const req = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
      await sendMessage(page, 'Think about this.');
      sent.push(JSON.parse((await req).postData()));
      const a = await waitAnswer(page, ['done'], 1);
      prompts.push({ text: loggedPrompt(chatIds.at(-1)), tokens: Number(a.stats.promptTokens) });
    }
    assert.strictEqual(sent[0].chat_template_kwargs.enable_thinking, true);
    assert.strictEqual(sent[1].chat_template_kwargs.enable_thinking, false);
    const empty = '<think>\\n\\n</think>\\n\\n';
    assert.ok(!prompts[0].text.includes(empty), `thinking on: ${prompts[0].text}`);
    assert.ok(prompts[1].text.includes(empty), `thinking off: ${prompts[1].text}`);
    assert.ok(prompts[1].tokens > prompts[0].tokens, JSON.stringify(prompts));
    assert.ok(sent.every((b) => b.stream === true && b.stream_options.include_usage === true));
  });

  await check('thinking is shown folded, apart from the answer', async () => {
    await page.click('#new-chat');
    const { answered } = await rewriteNextChat(page, base, 'First I weigh the options.', 'The answer is **42**.');
    await sendMessage(page, 'What is the answer?');
    await answered;
    await waitAnswer(page, ['done'], 1);
    const r = await page.$eval('.msg.assistant', (n) => ({
      open: n.querySelector('details.think').open,
      think: n.querySelector('details.think .think-body').textContent,
      md: n.querySelector('.md').textContent,
      strong: n.querySelector('.md strong') && n.querySelector('.md strong').textContent,
    }));
    assert.deepStrictEqual(r, { open: false, think: 'First I weigh the options.', md: 'The answer is 42.', strong: '42' });
    await page.click('details.think summary');
    assert.ok(await page.$eval('details.think', (d) => d.open));
  });

  await check('Markdown renders, and hostile answers stay text', async () => {
    const r = await page.evaluate(async () => {
      const { renderMarkdown } = await import('/webui/markdown.js');
      const box = document.createElement('div');
      document.body.append(box);
      const render = (src) => {
        box.replaceChildren(renderMarkdown(src));
        return box;
      };
      const out = {};
      let b = render('# Title\n\nSome *em*, **strong**, `code` and ~~gone~~.\n\n```js\nif (a < b) { x = "<b>"; }\n```\n\n' +
        '- one\n- two\n  1. nested\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n> quoted\n\n[site](https://example.org/x)');
      out.good = {
        h1: b.querySelector('h1')?.textContent,
        em: b.querySelector('em')?.textContent,
        strong: b.querySelector('strong')?.textContent,
        code: b.querySelector('p code')?.textContent,
        del: b.querySelector('del')?.textContent,
        pre: b.querySelector('pre code')?.textContent,
        lang: b.querySelector('pre code')?.className,
        items: b.querySelectorAll('ul > li').length,
        nested: b.querySelector('ul li ol li')?.textContent,
        cells: [...b.querySelectorAll('td')].map((c) => c.textContent + ':' + c.className),
        quote: b.querySelector('blockquote')?.textContent.trim(),
        href: b.querySelector('a')?.getAttribute('href'),
        rel: b.querySelector('a')?.getAttribute('rel'),
      };
      const hostile = [
        '<script>window.__xss = 1</script>',
        '<img src=x onerror="window.__xss = 2">',
        '<svg onload="window.__xss = 3"></svg>',
        '[click](javascript:window.__xss=4)',
        '[click](JaVaScRiPt:window.__xss=5)',
        '[data](data:text/html,<script>window.__xss=6</script>)',
        '![img](https://example.org/a.png)',
        '![x](javascript:window.__xss=7)',
        '<a href="javascript:window.__xss=8">a</a>',
        '```"><img src=x onerror="window.__xss=9">\ncode\n```',
        '| <b onclick="window.__xss=10">x</b> |\n|---|\n| <iframe src="javascript:1"></iframe> |',
        '<https://example.org/"onmouseover="window.__xss=11>',
        '**<style>body{display:none}</style>**',
        '[a](https://example.org/" onclick="window.__xss=12)',
        '*'.repeat(5000) + 'a' + '_'.repeat(5000),
        '['.repeat(3000) + '`'.repeat(3000),
      ].join('\n\n');
      b = render(hostile);
      const allowed = new Set(['P', 'BR', 'EM', 'STRONG', 'DEL', 'CODE', 'PRE', 'A', 'DIV', 'SPAN', 'BUTTON', 'H1', 'H2', 'H3', 'H4',
        'H5', 'H6', 'UL', 'OL', 'LI', 'BLOCKQUOTE', 'HR', 'TABLE', 'THEAD', 'TBODY', 'TR', 'TH', 'TD']);
      const attrs = new Set(['class', 'href', 'target', 'rel', 'start', 'type']);
      out.bad = [];
      for (const e of b.querySelectorAll('*')) {
        if (!allowed.has(e.tagName)) out.bad.push('element ' + e.tagName);
        for (const a of e.attributes) if (!attrs.has(a.name)) out.bad.push(`attribute ${a.name} on ${e.tagName}`);
        if (e.hasAttribute('href') && !/^(https?|mailto):/.test(e.getAttribute('href'))) out.bad.push('href ' + e.getAttribute('href'));
        if (e.className && !/^(code|code-head|copy|table-wrap|language-[\w+#.-]+|al-right|al-center)$/.test(e.className))
          out.bad.push('class ' + e.className);
      }
      out.text = b.textContent.includes('<script>window.__xss = 1</script>') && b.textContent.includes('<img src=x onerror=');
      await new Promise((r) => setTimeout(r, 200));
      out.xss = window.__xss === undefined ? 'none' : String(window.__xss);
      box.remove();
      return out;
    });
    assert.deepStrictEqual(r.good, {
      h1: 'Title', em: 'em', strong: 'strong', code: 'code', del: 'gone', pre: 'if (a < b) { x = "<b>"; }',
      lang: 'language-js', items: 2, nested: 'nested', cells: ['1:', '2:al-right'], quote: 'quoted',
      href: 'https://example.org/x', rel: 'noopener noreferrer nofollow',
    });
    assert.deepStrictEqual(r.bad, []);
    assert.ok(r.text, 'the raw HTML is not shown as text');
    assert.strictEqual(r.xss, 'none', 'a hostile answer ran script');
  });

  await check('a hostile answer streamed into the chat renders as text', async () => {
    await page.click('#new-chat');
    const evil = 'Look: <img src=x onerror="window.__xss=20"> [x](javascript:window.__xss=21)\n\n<script>window.__xss=22</script>';
    const { answered } = await rewriteNextChat(page, base, '<b onclick="window.__xss=23">think</b>', evil);
    await sendMessage(page, 'Say something nasty.');
    await answered;
    await waitAnswer(page, ['done'], 1);
    const r = await page.$eval('.msg.assistant', (n) => ({
      img: n.querySelectorAll('img, script, b').length,
      links: n.querySelectorAll('a').length,
      text: n.querySelector('.md').textContent,
      xss: window.__xss === undefined ? 'none' : String(window.__xss),
    }));
    assert.deepStrictEqual(r, {
      img: 0, links: 0, xss: 'none',
      text: 'Look: <img src=x onerror="window.__xss=20"> x<script>window.__xss=22</script>',
    });
  });

  await check('a reload restores the conversations', async () => {
    const before = { sidebar: await page.$$eval('.conv-list .conv', (ns) => ns.map((n) => n.textContent)), answers: await answers(page) };
    assert.ok(before.sidebar.length >= 5, `conversations: ${before.sidebar}`);
    await page.reload({ waitUntil: 'networkidle0' });
    const after = { sidebar: await page.$$eval('.conv-list .conv', (ns) => ns.map((n) => n.textContent)), answers: await answers(page) };
    assert.deepStrictEqual(after, before);
    // The first conversation, with its stopped answer, from storage.
    const titles = before.sidebar;
    const buttons = await page.$$('.conv-list .conv');
    await buttons[titles.indexOf('Tell me about streams.')].click();
    const msgs = await page.$$eval('.msg', (ns) => ns.map((n) => n.className + ':' + n.dataset.state));
    assert.deepStrictEqual(msgs, ['msg user:done', 'msg assistant:done', 'msg user:done', 'msg assistant:stopped']);
    assert.ok(await page.$eval('#thinking', (c) => c.checked === false), 'the thinking setting was not kept');
  });

  await check('no console errors or CSP violations on the chat page', async () => {
    assert.deepStrictEqual(page.problems, []);
    assert.deepStrictEqual(await page.evaluate(() => window.__cspViolations), []);
  });

  const status = await openPage(browser);
  await check('/status charts update while a load runs', async () => {
    await status.goto(base + '/status', { waitUntil: 'networkidle0' });
    await status.waitForFunction(() => /tiny/.test(document.getElementById('model-info').textContent), { timeout: LONG });
    const geometry = await status.$eval('#model-info', (d) => d.textContent);
    assert.match(geometry, /2 layers · hidden 256/);
    const points = () => status.$eval('#chart-tps svg', (s) => Number(s.dataset.points));
    const lastTps = () => status.$eval('#chart-tps [data-series=tokens_per_s]', (b) => Number(b.dataset.last || 0));
    const polls = () => status.evaluate(() => Number(document.body.dataset.polls));
    // First an interval without load is drawn, so what follows shows the load.
    await waitFor('an idle interval on the tokens/s chart', async () => (await points()) > 0 && (await lastTps()) === 0, LONG, 250);
    const p0 = await points(), t0 = await polls();
    // Load: two clients asking for short answers until the charts show them.
    let running = true;
    const client = async () => {
      while (running) {
        await fetch(base + '/v1/chat/completions', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'load' }], max_tokens: 12 }),
        }).then((r) => r.text());
      }
    };
    const clients = [client(), client()];
    try {
      await waitFor('a tokens/s point above 0 drawn after the load began', async () =>
        (await polls()) > t0 && (await points()) > p0 && (await lastTps()) > 0, LONG, 250);
      await waitFor('TTFT and inter-token points', () => status.evaluate(() =>
        ['chart-ttft', 'chart-itl'].every((id) => Number(document.querySelector(`#${id} svg`).dataset.points) > 0)), LONG, 250);
    } finally {
      running = false;
      await Promise.all(clients);
    }
    const d = await status.$eval('#chart-tps path.line.s0', (p) => p.getAttribute('d'));
    assert.match(d, /^M[\d.]+ [\d.]+/);
    // The load's requests looked up the prefix cache: its card shows their count.
    await waitFor('the prefix-cache card', () => status.$eval('#prefix-card', (c) =>
      !c.hidden && /hits/.test(c.textContent) && /misses\s*[1-9]/.test(c.textContent)), LONG, 250);
  });

  await check('no console errors or CSP violations on the status page', async () => {
    assert.deepStrictEqual(status.problems, []);
    assert.deepStrictEqual(await status.evaluate(() => window.__cspViolations), []);
  });

  await browser.close();
  await front.close();
  finish('webui-checks');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
