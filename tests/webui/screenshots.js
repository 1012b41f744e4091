// Screenshots of the chat and status pages (1280x800 and a 390x844 phone)
// and the page weight of each (bytes on the wire for a first load, with an
// empty cache), against a daemon on the tiny model (tests/webui/
// screenshots.sh, run by `make screenshots`; never part of `make check`).
//
// The tiny model's random weights write noise, so the chat's answers are
// the daemon's real streams with their text replaced by sample text (the
// tests' rewriteNextChat); the figures under them are the daemon's. The
// status page is taken near the end of a short load, whose history its
// charts show.
//
// Usage: node screenshots.js BASE OUTDIR [LOAD_SECONDS]
'use strict';
const fs = require('fs');
const path = require('path');
const { launch, openPage } = require('./browser.js');
const { sleep, setSettings, sendMessage, rewriteNextChat } = require('./helpers.js');

const [base, outDir, loadArg] = process.argv.slice(2);
const LOAD_SECONDS = Number(loadArg || 75);

const SAMPLES = [
  {
    ask: 'What does a KV cache hold?',
    think: 'The user asks about the KV cache. Keep it short: keys and values per layer, why it saves work.',
    answer: 'For every layer, the **keys and values** of all tokens seen so far. A new token then only computes its ' +
      'own row and attends over the cached ones, instead of running the whole prefix again.',
  },
  {
    ask: 'Reverse a string in place in C, please.',
    think: 'Two indices from both ends, swap until they meet. Mention that this reverses bytes, not UTF-8 characters.',
    answer: 'Swap from both ends until the indices meet:\n\n```c\n#include <string.h>\n\nvoid reverse(char *s)\n{\n' +
      '    size_t i = 0, j = strlen(s);\n    while (j-- > i + 1) {\n        char t = s[i];\n        s[i++] = s[j];\n' +
      '        s[j] = t;\n    }\n}\n```\n\nNotes:\n\n- It runs in *O(n)* time and needs no extra memory.\n' +
      '- It reverses **bytes**: a UTF-8 string with multi-byte characters needs them kept whole.\n\n' +
      '| input | output |\n|---|---|\n| `"abc"` | `"cba"` |\n| `""` | `""` |',
  },
];

async function load(seconds) {
  const end = Date.now() + seconds * 1000;
  const client = async (k) => {
    for (let i = 0; Date.now() < end; i++) {
      await fetch(base + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: `question ${k}.${i}` }], max_tokens: 8 + ((i * 7 + k * 3) % 40), seed: i }),
      }).then((r) => r.text());
      await sleep(200 * (k + 1));
    }
  };
  await Promise.all([client(0), client(1)]);
}

// Bytes transferred (headers and bodies as sent) and requests, for a first load of URL in a fresh context.
async function pageWeight(browser, url) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  let bytes = 0, requests = 0;
  cdp.on('Network.loadingFinished', (e) => {
    bytes += e.encodedDataLength;
    requests++;
  });
  await page.goto(url, { waitUntil: 'networkidle0' });
  await sleep(500);
  await ctx.close();
  return { bytes, requests };
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const browser = await launch();
  console.log(`load for ${LOAD_SECONDS} s, so the status charts have a history`);
  const loading = load(LOAD_SECONDS);
  await sleep(Math.max(0, LOAD_SECONDS - 12) * 1000);
  const shots = [];
  const shoot = async (p, name, fullPage = false) => {
    const file = path.join(outDir, name);
    await sleep(300);
    await p.screenshot({ path: file, fullPage });
    shots.push(file);
  };
  const status = await openPage(browser);
  await status.goto(base + '/status', { waitUntil: 'networkidle0' });
  await status.waitForFunction(() => Number(document.body.dataset.polls) > 0);
  await shoot(status, 'status-1280x800.png');
  await status.setViewport({ width: 390, height: 844, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
  await status.reload({ waitUntil: 'networkidle0' });
  await status.waitForFunction(() => Number(document.body.dataset.polls) > 0);
  await shoot(status, 'status-390x844.png');
  await shoot(status, 'status-390-full.png', true);
  await loading;

  const page = await openPage(browser);
  await page.goto(base + '/', { waitUntil: 'networkidle0' });
  await setSettings(page, { max_tokens: 160, system: 'You are a concise assistant.' });
  for (const s of SAMPLES) {
    await page.click('#new-chat');
    const { answered } = await rewriteNextChat(page, base, s.think, s.answer);
    await sendMessage(page, s.ask);
    await answered;
    await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant')].every((n) => n.dataset.state === 'done'));
  }
  await page.click('.msg.assistant details.think summary');
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  await shoot(page, 'chat-1280x800.png');
  await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
  await page.reload({ waitUntil: 'networkidle0' });
  await page.evaluate(() => {
    const box = document.getElementById('messages');
    box.scrollTop = box.scrollHeight;
  });
  await shoot(page, 'chat-390x844.png');
  const problems = [...page.problems, ...status.problems];

  for (const [name, url] of [['chat page (GET /)', base + '/'], ['status page (GET /status)', base + '/status']]) {
    const w = await pageWeight(browser, url);
    console.log(`page weight, ${name}: ${w.bytes} bytes in ${w.requests} requests (first load, gzip)`);
  }
  await browser.close();
  for (const f of shots) console.log('wrote ' + f);
  if (problems.length) {
    console.error(problems.join('\n'));
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
