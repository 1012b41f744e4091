// HTTP load driver for `qwen3d serve`, on Node's http module alone.
//
// Load mode: N concurrent streaming clients send R completion requests in
// all (each a prompt of P token ids, greedy, max_tokens G) and the driver
// reports time to first token and inter-token latency percentiles (p50, p90,
// p99) as the clients see them, completion tokens per second over the run,
// and the daemon's own `timings`.
//
// Compare mode (--compare): the HTTP overhead against the engine alone on
// the same model, prompt ids and thread count. Each round runs
// `qwen3d bench --json --prompt-len P --gen G --threads T --repeat R` and then
// R requests to the daemon one at a time (the daemon idles while the bench
// runs), and prints per round and as medians of the rounds:
//   ttft_ratio   = HTTP TTFT median / engine ttft_ms
//   decode_ratio = HTTP decode tokens/s / engine decode_tokens_per_s
// where the HTTP decode rate of a request is (completion tokens - 1) over the
// time from its first text event to its final chunk (the median over the
// round's requests), and the engine's is 1000 / its median step. The HTTP
// side is a mean over each request, so a slow step counts against it; it
// does not depend on one event carrying one token.
// The design's targets are ttft_ratio <= 1.05 and decode_ratio >= 0.97.
// Speed is reported, never asserted.
//
// The prompt ids are those `qwen3d bench` uses (the same xorshift sequence),
// so prefill does the same work. Greedy decoding may meet an end-of-sequence
// id before G tokens; the driver reports the tokens actually generated.
//
// usage:
//   node bench/http-load.js --url http://127.0.0.1:8080 [--model-name NAME] [load options]
//   node bench/http-load.js --qwen3d ./qwen3d --model DIR [--threads T] [load options]
//   node bench/http-load.js --qwen3d ./qwen3d --model DIR --compare [--rounds K] [--threads T]
// load options: --concurrency N (4) --prompt-len P (32) --gen G (64) --requests R (16) --json
'use strict';
const http = require('http');
const path = require('path');
const { spawn, execFile } = require('child_process');

function usage(msg) {
  if (msg) console.error(`http-load: ${msg}`);
  console.error('usage: node http-load.js (--url URL | --qwen3d BIN --model DIR) [--threads T] [--parallel N]\n' +
    '         [--concurrency N] [--prompt-len P] [--gen G] [--requests R] [--compare [--rounds K]] [--json]');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { concurrency: 4, promptLen: 32, gen: 64, requests: 16, rounds: 3, threads: 0, parallel: 0,
    compare: false, json: false, url: null, qwen3d: null, model: null, modelName: null };
  const ints = { '--concurrency': 'concurrency', '--prompt-len': 'promptLen', '--gen': 'gen', '--requests': 'requests',
    '--rounds': 'rounds', '--threads': 'threads', '--parallel': 'parallel' };
  const strs = { '--url': 'url', '--qwen3d': 'qwen3d', '--model': 'model', '--model-name': 'modelName' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--compare') o.compare = true;
    else if (a === '--json') o.json = true;
    else if (a === '--help') usage();
    else if (ints[a] || strs[a]) {
      const v = argv[++i];
      if (v === undefined) usage(`${a} needs a value`);
      if (ints[a]) {
        if (!/^\d+$/.test(v) || (Number(v) < 1 && a !== '--threads')) usage(`${a} must be a positive integer, not '${v}'`);
        o[ints[a]] = Number(v);
      } else {
        o[strs[a]] = v;
      }
    } else usage(`unknown argument '${a}'`);
  }
  if (!o.url && !(o.qwen3d && o.model)) usage('give --url, or --qwen3d and --model');
  if (o.compare && !(o.qwen3d && o.model)) usage('--compare needs --qwen3d and --model');
  return o;
}

// The prompt ids of `qwen3d bench` (server/cmd_bench.c, prompt_ids()).
function benchPromptIds(n, vocab = 151936) {
  const mask = (1n << 64n) - 1n;
  let x = 88172645463325252n;
  const span = BigInt(vocab > 151643 ? 151643 : vocab);
  const ids = [];
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & mask;
    x ^= x >> 7n;
    x ^= (x << 17n) & mask;
    ids.push(Number(x % span));
  }
  return ids;
}

// Nearest-rank percentile of a sorted array, as `qwen3d bench` computes it.
function pct(sorted, p) {
  if (!sorted.length) return NaN;
  const i = Math.floor(p * (sorted.length - 1) + 0.5);
  return sorted[Math.min(i, sorted.length - 1)];
}
const sorted = (a) => a.slice().sort((x, y) => x - y);
const median = (a) => pct(sorted(a), 0.5);

// ---- the daemon -------------------------------------------------------------

function startDaemon(o) {
  const args = ['serve', '--model', o.model, '--host', '127.0.0.1', '--port', '0',
    '--parallel', String(o.parallel || Math.max(1, o.concurrency)), '--queue', String(Math.max(64, o.requests))];
  if (o.threads) args.push('--threads', String(o.threads));
  const child = spawn(o.qwen3d, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  process.on('exit', () => { try { child.kill('SIGKILL'); } catch (_) { /* gone */ } });
  return new Promise((resolve, reject) => {
    let log = '', port = 0;
    const timer = setTimeout(() => reject(new Error(`the daemon did not load within 300 s:\n${log.slice(-800)}`)), 300000);
    child.stderr.on('data', (d) => {
      log += d;
      if (log.length > 65536) log = log.slice(-32768);
      const m = /event=listening host=\S+ port=(\d+)/.exec(log);
      if (m) port = Number(m[1]);
      const name = /event=model_loaded .*? name=(\S+)/.exec(log);
      if (port && name) {
        clearTimeout(timer);
        child.stderr.removeAllListeners('data');
        child.stderr.resume();
        resolve({ child, url: `http://127.0.0.1:${port}`, name: name[1] });
      }
    });
    child.on('exit', (code) => reject(new Error(`the daemon exited (${code}) while starting:\n${log.slice(-800)}`)));
  });
}

function stopDaemon(d) {
  return new Promise((resolve) => {
    d.child.removeAllListeners('exit');
    d.child.on('exit', () => resolve());
    d.child.kill('SIGTERM');
  });
}

// ---- one streamed request -----------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

// Sends one streaming completion; resolves to the client-side timings:
// ttft_ms (send to first text event), gaps (ms between text events), the
// usage and the daemon's timings from the last chunk.
function streamOnce(base, body) {
  const url = new URL('/v1/completions', base);
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const times = [];
    let buf = '', usage = null, timings = null, finish = null, err = null, tEnd = 0;
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': payload.length } }, (res) => {
      if (res.statusCode !== 200) {
        let t = '';
        res.on('data', (d) => { t += d; });
        res.on('end', () => reject(new Error(`status ${res.statusCode}: ${t.slice(0, 300)}`)));
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (s) => {
        const now = performance.now();
        buf += s;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          if (j.error) { err = j.error; continue; }
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          const c = j.choices && j.choices[0];
          if (c && c.text) times.push(now);
          if (c && c.finish_reason) {
            finish = c.finish_reason;
            tEnd = now;
          }
        }
      });
      res.on('end', () => {
        if (err) return reject(new Error(`error event: ${JSON.stringify(err)}`));
        if (!usage) return reject(new Error('the stream ended without usage'));
        const gaps = [];
        for (let i = 1; i < times.length; i++) gaps.push(times[i] - times[i - 1]);
        // Decode rate as the client saw it, over the same span the daemon's
        // timings.decode_tokens_per_s covers (first to last token).
        const span = (tEnd - times[0]) / 1000;
        resolve({ ttft_ms: times.length ? times[0] - t0 : NaN, gaps, events: times.length, usage, timings, finish,
          decode_tokens_per_s: usage.completion_tokens > 1 && span > 0 ? (usage.completion_tokens - 1) / span : NaN,
          total_ms: performance.now() - t0 });
      });
    });
    req.on('error', reject);
    req.setTimeout(600000, () => req.destroy(new Error('timed out')));
    req.end(payload);
  });
}

// R requests from N concurrent clients; returns the per-request results and the wall time.
async function runLoad(base, model, o, n, r) {
  const body = { model, prompt: benchPromptIds(o.promptLen), max_tokens: o.gen, temperature: 0, stream: true,
    stream_options: { include_usage: true } };
  const results = [];
  let next = 0;
  const t0 = performance.now();
  const client = async () => {
    while (next < r) {
      next++;
      results.push(await streamOnce(base, body));
    }
  };
  await Promise.all(Array.from({ length: n }, client));
  return { results, wall_ms: performance.now() - t0 };
}

function summarize(load) {
  const rs = load.results;
  const ttft = sorted(rs.map((x) => x.ttft_ms));
  const gaps = sorted(rs.flatMap((x) => x.gaps));
  const tokens = rs.reduce((a, x) => a + x.usage.completion_tokens, 0);
  const events = rs.reduce((a, x) => a + x.events, 0);
  const p = (a) => ({ p50: pct(a, 0.5), p90: pct(a, 0.9), p99: pct(a, 0.99) });
  return {
    requests: rs.length,
    completion_tokens: tokens,
    text_events: events,
    wall_s: load.wall_ms / 1000,
    tokens_per_s: tokens / (load.wall_ms / 1000),
    ttft_ms: p(ttft),
    itl_ms: p(gaps),
    server_ttft_ms_median: median(rs.map((x) => x.timings.ttft_ms)),
    server_decode_tokens_per_s_median: median(rs.map((x) => x.timings.decode_tokens_per_s)),
    client_decode_tokens_per_s_median: median(rs.map((x) => x.decode_tokens_per_s)),
    // What the transport adds to the daemon's own TTFT (the request's way in,
    // and the first token's way out), per request.
    transport_ttft_ms_median: median(rs.map((x) => x.ttft_ms - x.timings.ttft_ms)),
    // The client's decode rate over the daemon's, per request: below 1 when
    // tokens reach the client later and later.
    transport_decode_ratio_median: median(rs.map((x) => x.decode_tokens_per_s / x.timings.decode_tokens_per_s)),
  };
}

const f = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

function printLoad(o, s) {
  if (o.json) {
    console.log(JSON.stringify({ mode: 'load', concurrency: o.concurrency, prompt_len: o.promptLen, gen: o.gen, ...s }));
    return;
  }
  console.log(`${s.requests} requests, ${o.concurrency} concurrent, prompt ${o.promptLen} ids, max_tokens ${o.gen}: ` +
    `${s.completion_tokens} tokens in ${f(s.wall_s)} s = ${f(s.tokens_per_s, 1)} tokens/s` +
    (s.text_events !== s.completion_tokens ? ` (${s.text_events} text events)` : ''));
  console.log(`  TTFT ms:            p50 ${f(s.ttft_ms.p50)}  p90 ${f(s.ttft_ms.p90)}  p99 ${f(s.ttft_ms.p99)}`);
  console.log(`  inter-token ms:     p50 ${f(s.itl_ms.p50)}  p90 ${f(s.itl_ms.p90)}  p99 ${f(s.itl_ms.p99)}`);
  console.log(`  daemon timings:     ttft_ms median ${f(s.server_ttft_ms_median)}, ` +
    `decode_tokens_per_s median ${f(s.server_decode_tokens_per_s_median)}; ` +
    `client TTFT - daemon ttft_ms median ${f(s.transport_ttft_ms_median)} ms, ` +
    `client / daemon decode rate median ${f(s.transport_decode_ratio_median, 3)}`);
}

// ---- compare mode ---------------------------------------------------------------

function engineBench(o) {
  const args = ['bench', '--model', o.model, '--json', '--prompt-len', String(o.promptLen), '--gen', String(o.gen),
    '--repeat', String(o.requests), '--contexts', 'none'];
  if (o.threads) args.push('--threads', String(o.threads));
  return new Promise((resolve, reject) => {
    execFile(o.qwen3d, args, { maxBuffer: 1 << 20 }, (e, stdout, stderr) => {
      if (e) return reject(new Error(`qwen3d bench: ${stderr || e.message}`));
      resolve(stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((x) => x.case === 'prompt'));
    });
  });
}

async function compare(o) {
  const d = await startDaemon({ ...o, concurrency: 1, parallel: 1 });
  const rows = [];
  try {
    // One request first: the daemon's first generation is not measured.
    await runLoad(d.url, d.name, o, 1, 1);
    for (let k = 0; k < o.rounds; k++) {
      const e = await engineBench(o);
      const s = summarize(await runLoad(d.url, d.name, o, 1, o.requests));
      const row = {
        round: k + 1,
        engine_ttft_ms: e.ttft_ms, http_ttft_ms: s.ttft_ms.p50, server_ttft_ms: s.server_ttft_ms_median,
        transport_ttft_ms: s.transport_ttft_ms_median,
        engine_decode_tokens_per_s: e.decode_tokens_per_s, http_decode_tokens_per_s: s.client_decode_tokens_per_s_median,
        server_decode_tokens_per_s: s.server_decode_tokens_per_s_median,
        transport_decode_ratio: s.transport_decode_ratio_median,
        ttft_ratio: s.ttft_ms.p50 / e.ttft_ms, decode_ratio: s.client_decode_tokens_per_s_median / e.decode_tokens_per_s,
        completion_tokens: s.completion_tokens, text_events: s.text_events, threads: e.threads,
      };
      rows.push(row);
      if (o.json) {
        console.log(JSON.stringify({ mode: 'compare', ...row }));
        continue;
      }
      console.log(`round ${row.round}: TTFT ms engine ${f(row.engine_ttft_ms)}, HTTP ${f(row.http_ttft_ms)} ` +
        `(daemon ${f(row.server_ttft_ms)} + transport ${f(row.transport_ttft_ms)}): ratio ${f(row.ttft_ratio, 3)}`);
      console.log(`  decode tok/s engine ${f(row.engine_decode_tokens_per_s)}, HTTP ${f(row.http_decode_tokens_per_s)} ` +
        `(daemon ${f(row.server_decode_tokens_per_s)}, client/daemon ${f(row.transport_decode_ratio, 3)}): ` +
        `ratio ${f(row.decode_ratio, 3)}` +
        (row.text_events !== row.completion_tokens ? ` [${row.completion_tokens} tokens in ${row.text_events} events]` : ''));
    }
  } finally {
    await stopDaemon(d);
  }
  const med = (k) => median(rows.map((r) => r[k]));
  const summary = {
    mode: 'compare-summary', model: path.resolve(o.model), prompt_len: o.promptLen, gen: o.gen,
    requests_per_round: o.requests, rounds: o.rounds, threads: rows[0].threads,
    ttft_ratio_median: med('ttft_ratio'), decode_ratio_median: med('decode_ratio'),
    transport_ttft_ms_median: med('transport_ttft_ms'), transport_decode_ratio_median: med('transport_decode_ratio'),
  };
  summary.ttft_target_met = summary.ttft_ratio_median <= 1.05;
  summary.decode_target_met = summary.decode_ratio_median >= 0.97;
  if (o.json) {
    console.log(JSON.stringify(summary));
    return;
  }
  const met = (ok) => (ok ? 'met' : 'missed');
  console.log(`median of ${o.rounds} rounds: TTFT ratio ${f(summary.ttft_ratio_median, 3)} (target <= 1.05: ` +
    `${met(summary.ttft_target_met)}), decode tokens/s ratio ${f(summary.decode_ratio_median, 3)} (target >= 0.97: ` +
    `${met(summary.decode_target_met)})`);
  console.log(`  transport: +${f(summary.transport_ttft_ms_median)} ms TTFT, client/daemon decode rate ` +
    `${f(summary.transport_decode_ratio_median, 3)}`);
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.compare) return compare(o);
  let d = null, base = o.url, model = o.modelName;
  if (!base) {
    d = await startDaemon(o);
    base = d.url;
    model = d.name;
  }
  try {
    if (!model) {
      const r = await fetch(`${base}/v1/models`);
      model = (await r.json()).data[0].id;
    }
    await runLoad(base, model, o, 1, 1);
    printLoad(o, summarize(await runLoad(base, model, o, o.concurrency, o.requests)));
  } finally {
    if (d) await stopDaemon(d);
  }
}

main().catch((e) => {
  console.error(`http-load: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
