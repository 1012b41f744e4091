// A multi-turn chat replayed through `qwen3d serve`'s /v1/chat/completions
// (the daemon renders the Qwen3 template), on Node's http module alone: a
// system prompt of S words, then K turns, each resending the whole history
// (every earlier user message, and every assistant message as the client
// received it: its content, not its reasoning) plus a new user message of U
// words; greedy, max_tokens G, streamed with usage. It runs once with
// chat_template_kwargs.enable_thinking true and once false, on a daemon with
// the prefix cache and, unless --no-off, on one with --no-prefix-cache (both
// loaded side by side; an idle one uses no CPU).
//
// Per turn: prompt tokens; usage.prompt_tokens_details.cached_tokens; the
// tokens prefilled (prompt - cached); "lost", the previous turn's prompt
// tokens the cache could not reuse (previous prompt - cached: where the
// template rewrote the end of the previous prompt, as Qwen3's does with an
// empty think block when thinking is off); the previous reply's completion
// tokens, which the next prompt carries again as text and which are
// prefilled again, since the cache keeps the rows of rendered prompts only
// (never of generated ids: decode rows differ in bits from prefill rows, and
// the template drops earlier turns' think blocks, so the generated ids of a
// thinking reply are not what the next prompt holds); TTFT as the client
// sees it, and the daemon's timings.ttft_ms and prompt_ms; with the cache
// off, the same turn's TTFT. Summary per run: the TTFT of turn 2 and of
// turn K, and their ratio (flat: near 1; growing with the history: well
// above), with the cache and without.
//
// usage:
//   node bench/chat-replay.js --qwen3d BIN --model DIR [--threads T] [--turns K (10)]
//     [--system-words S (300)] [--user-words U (20)] [--gen G (64)] [--no-off] [--json]
// Speed is reported, never asserted.
'use strict';
const http = require('http');
const { spawn } = require('child_process');

const WORDS = ('time person year way day thing world life hand part child eye place work week case point company ' +
  'number group problem fact house water money story month book job word business side kind head service friend ' +
  'power hour game line end member law car city name team minute idea body back face level office door health ' +
  'art history party result change morning reason moment air force river garden window table paper music market ' +
  'letter light voice field price stone bridge road sound heart summer winter spring evening island village')
  .split(' ');

function usage(msg) {
  if (msg) console.error(`chat-replay: ${msg}`);
  console.error('usage: node chat-replay.js --qwen3d BIN --model DIR [--threads T] [--turns K] [--system-words S]\n' +
    '         [--user-words U] [--gen G] [--no-off] [--json]');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { qwen3d: null, model: null, threads: 0, turns: 10, systemWords: 300, userWords: 20, gen: 64,
    off: true, json: false };
  const ints = { '--threads': 'threads', '--turns': 'turns', '--system-words': 'systemWords',
    '--user-words': 'userWords', '--gen': 'gen' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--no-off') o.off = false;
    else if (a === '--json') o.json = true;
    else if (a === '--qwen3d' || a === '--model') {
      if (argv[i + 1] === undefined) usage(`${a} needs a value`);
      o[a.slice(2)] = argv[++i];
    } else if (ints[a]) {
      const v = argv[++i];
      if (v === undefined || !/^\d+$/.test(v) || (Number(v) < 1 && a !== '--threads'))
        usage(`${a} must be a positive integer, not '${v}'`);
      o[ints[a]] = Number(v);
    } else usage(`unknown argument '${a}'`);
  }
  if (!o.qwen3d || !o.model) usage('--qwen3d and --model are required');
  return o;
}

// N words from the list, starting at word SEED: deterministic, and distinct per seed.
function words(n, seed) {
  return Array.from({ length: n }, (_, i) => WORDS[(seed * 31 + i * 7) % WORDS.length]).join(' ');
}

// Starts `qwen3d serve` on a free port; resolves once the model is loaded.
function start(o, extra) {
  const args = ['serve', '--model', o.model, '--host', '127.0.0.1', '--port', '0', '--drain-delay', '0', ...extra];
  if (o.threads) args.push('--threads', String(o.threads));
  const p = spawn(o.qwen3d, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let log = '', port = 0;
    const timer = setTimeout(() => reject(new Error(`the daemon did not load within 600 s: ${log.slice(-300)}`)), 600000);
    p.stderr.on('data', (d) => {
      log += d;
      const m = /event=listening host=\S+ port=(\d+)/.exec(log);
      if (m) port = Number(m[1]);
      if (port && log.includes('event=model_loaded')) {
        clearTimeout(timer);
        p.stderr.removeAllListeners('data');
        p.stderr.resume();
        resolve({ proc: p, base: `http://127.0.0.1:${port}` });
      }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`the daemon exited (${code}): ${log.slice(-300)}`)); });
  });
}

function stop(d) {
  if (!d) return Promise.resolve();
  d.proc.removeAllListeners('exit');
  return new Promise((resolve) => { d.proc.on('exit', resolve); d.proc.kill('SIGTERM'); });
}

// One streamed chat request: the client's TTFT (to the first content or
// reasoning event), the reply's content, usage and timings.
function chat(base, body) {
  const payload = Buffer.from(JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }));
  const url = new URL('/v1/chat/completions', base);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let ttft = null, buf = '', content = '', usage = null, timings = null;
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': payload.length } }, (res) => {
      if (res.statusCode !== 200) {
        let t = '';
        res.on('data', (d) => { t += d; });
        res.on('end', () => reject(new Error(`status ${res.statusCode}: ${t}`)));
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          if (j.error) return reject(new Error(JSON.stringify(j.error)));
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          const delta = j.choices && j.choices[0] && j.choices[0].delta;
          if (delta && (delta.content || delta.reasoning_content) && ttft === null) ttft = performance.now() - t0;
          if (delta && delta.content) content += delta.content;
        }
      });
      res.on('end', () => (usage ? resolve({ ttft, content, usage, timings }) :
        reject(new Error('the stream ended without its usage chunk'))));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

// The K turns of one conversation on ON (and OFF): a row per turn.
async function replay(o, on, off, thinking) {
  const messages = [{ role: 'system', content: `You answer questions about these notes. ${words(o.systemWords, thinking ? 1 : 2)}` }];
  const rows = [];
  let prev = null;
  for (let t = 1; t <= o.turns; t++) {
    messages.push({ role: 'user', content: `Question ${t}: ${words(o.userWords, 100 + t)}?` });
    const body = { messages, max_tokens: o.gen, temperature: 0, chat_template_kwargs: { enable_thinking: thinking } };
    const r = await chat(on.base, body);
    const c = off ? await chat(off.base, body) : null;
    const u = r.usage, cached = u.prompt_tokens_details.cached_tokens;
    rows.push({
      turn: t, prompt: u.prompt_tokens, cached, prefilled: u.prompt_tokens - cached,
      lost: prev ? prev.prompt - cached : 0, prev_reply: prev ? prev.completion : 0,
      ttft_client_ms: r.ttft, ttft_ms: r.timings.ttft_ms, prompt_ms: r.timings.prompt_ms,
      ttft_off_ms: c ? c.timings.ttft_ms : null, same_text: c ? c.content === r.content : null,
    });
    prev = { prompt: u.prompt_tokens, completion: u.completion_tokens };
    messages.push({ role: 'assistant', content: r.content });
  }
  return rows;
}

const f = (x, d = 1) => (x === null || x === undefined ? '-' : typeof x === 'number' ? x.toFixed(d) : String(x));

function print(thinking, rows) {
  console.log(`\nenable_thinking ${thinking}`);
  const cols = ['turn', 'prompt', 'cached', 'prefilled', 'lost', 'prev_reply', 'ttft_client_ms', 'ttft_ms', 'prompt_ms',
    'ttft_off_ms', 'same_text'];
  console.log(cols.map((c) => c.padStart(c.length < 7 ? 7 : c.length)).join(' '));
  for (const r of rows)
    console.log(cols.map((c) => f(r[c], Number.isInteger(r[c]) ? 0 : 1).padStart(c.length < 7 ? 7 : c.length)).join(' '));
  const last = rows[rows.length - 1], second = rows[1];
  if (second) {
    console.log(`TTFT turn ${last.turn} / turn 2: cache on ${f(last.ttft_ms / second.ttft_ms, 2)}` +
      (last.ttft_off_ms !== null ? `, cache off ${f(last.ttft_off_ms / second.ttft_off_ms, 2)}` : '') +
      `; tokens of earlier prompts not reused: ${rows.reduce((a, r) => a + r.lost, 0)}` +
      `; replies prefilled again: ${rows.reduce((a, r) => a + r.prev_reply, 0)} tokens`);
  }
}

(async () => {
  const o = parseArgs(process.argv.slice(2));
  let on = null, off = null;
  try {
    on = await start(o, []);
    if (o.off) off = await start(o, ['--no-prefix-cache']);
    const out = {};
    for (const thinking of [true, false]) {
      const rows = await replay(o, on, off, thinking);
      out[`thinking_${thinking}`] = rows;
      if (!o.json) print(thinking, rows);
    }
    if (o.json) console.log(JSON.stringify({ options: { ...o, qwen3d: undefined }, runs: out }));
  } finally {
    await stop(on);
    await stop(off);
  }
})().catch((e) => {
  console.error(`chat-replay: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
