// A prompt of megabytes is tokenized off the daemon's event loop, for
// tests/serve_limits.sh. Prints one line and exits 0 when the check holds,
// 1 (with the reason) when it does not.
//
//   node big-prompt.js PORT BYTES
//     A completion whose prompt is BYTES letters (no spaces: one word the
//     tokenizer has to merge from scratch) is a 400 context_length_exceeded
//     after its tokenization; its time alone, T, is measured first. Then it
//     is sent again and, 0.3 T later, /health, a short completion given as
//     token ids (it needs no tokenizer) and a short text completion (it
//     tokenizes beside the large prompt, with an encoder of its own): all
//     must be answered before the large request, each within T / 2, and the
//     large request must get the same answer as alone. Times are only compared with T, never with a
//     constant, so a slow or busy machine stretches them alike.
'use strict';
const [portArg, bytesArg] = process.argv.slice(2);
const base = `http://127.0.0.1:${Number(portArg)}`;
const fail = (msg) => {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Pseudo-random lowercase letters, the same on every run.
function letters(n) {
  const b = Buffer.alloc(n);
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    b[i] = 97 + ((x >>> 16) % 26);
  }
  return b.toString('latin1');
}

// Resolves with the status, the body and the time it took (ms), and when it ended.
async function timed(path, body) {
  const t0 = performance.now();
  const init = body === undefined ? {} : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body };
  const r = await fetch(base + path, init);
  const text = await r.text();
  const end = performance.now();
  return { status: r.status, text, ms: end - t0, end };
}

async function main() {
  const big = JSON.stringify({ prompt: letters(Number(bytesArg)), max_tokens: 1 });
  const short = JSON.stringify({ prompt: [1, 2, 3, 4], max_tokens: 2, temperature: 0 });
  const shortText = JSON.stringify({ prompt: 'Hello there, how are you?', max_tokens: 2, temperature: 0 });

  // Alone, twice: the faster is T (the first may pay for page faults).
  const a1 = await timed('/v1/completions', big);
  const a2 = await timed('/v1/completions', big);
  for (const a of [a1, a2]) {
    if (a.status !== 400 || JSON.parse(a.text).error.code !== 'context_length_exceeded')
      fail(`the large prompt alone: ${a.status} ${a.text.slice(0, 300)}`);
  }
  if (a1.text !== a2.text) fail(`the large prompt got two answers: ${a1.text} / ${a2.text}`);
  const T = Math.min(a1.ms, a2.ms);

  const pending = timed('/v1/completions', big);
  await sleep(0.3 * T);
  const [health, small, text] = await Promise.all([timed('/health'), timed('/v1/completions', short),
    timed('/v1/completions', shortText)]);
  const b = await pending;

  if (b.status !== 400 || b.text !== a1.text) fail(`the large prompt with others: ${b.status} ${b.text.slice(0, 300)}`);
  if (health.status !== 200) fail(`/health: ${health.status} ${health.text}`);
  for (const [name, r] of [['token-id', small], ['text', text]])
    if (r.status !== 200 || JSON.parse(r.text).usage.completion_tokens !== 2)
      fail(`the short ${name} completion: ${r.status} ${r.text.slice(0, 300)}`);
  const ms = (v) => `${v.toFixed(0)} ms`;
  const report = `large prompt alone ${ms(T)}; /health ${ms(health.ms)}, short token-id completion ` +
    `${ms(small.ms)}, short text completion ${ms(text.ms)}`;
  if (health.end > b.end || small.end > b.end || text.end > b.end)
    fail(`answered only after the large prompt's tokenization (${report})`);
  if (health.ms > T / 2 || small.ms > T / 2 || text.ms > T / 2)
    fail(`held up by the large prompt's tokenization (${report})`);
  console.log(`ok: ${report}`);
}

main().catch((e) => fail(e.stack || String(e)));
