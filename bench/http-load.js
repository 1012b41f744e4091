// HTTP load driver for `qwen3d serve`, on Node's built-in modules alone.
//
// Load mode: N concurrent streaming clients send R completion requests in
// all (each a prompt of P token ids, greedy, max_tokens G) and the driver
// reports time to first token and inter-token latency percentiles (p50, p90,
// p99) as the clients see them, completion tokens per second over the run,
// and the daemon's own `timings`. Every request has its own prompt (see
// distinctPromptIds), so a prefix cache has nothing to reuse.
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
// does not depend on one event carrying one token. The requests send the
// bench's own ids, so the daemon runs without its prefix cache where it has
// one (--no-prefix-cache). The design's targets are ttft_ratio <= 1.05 and
// decode_ratio >= 0.97.
//
// Sweep mode (--sweep 1,2,4,8): for each concurrency level C, C closed-loop
// streaming clients (each sends its next request when its last one ends) send
// R requests per level in all (R/C each, rounded up), each a distinct prompt
// of P token ids (default 104), G generated tokens (default 64), greedy.
// Per level: total generated tokens/s (all clients, over the level's wall
// time from its first send to its last response), inter-token latency p50 and
// p95 (gaps between consecutive text events of a stream, pooled over all
// streams), TTFT p50 and p95, requests and errors. Before the first level,
// each daemon serves one warm-up request per client of the largest level, all
// at once; they are not counted. --qwen3d-before BIN runs another build on the
// same model, threads and prompts: both daemons stay loaded (an idle daemon
// uses no CPU), and each level runs on both, in the order before, after at
// even steps and after, before at odd ones (step = round * levels + level
// index), so that drift of a shared machine falls on both alike. --rounds K
// repeats the sweep, with new prompts, and reports per level the median of
// the rounds. The summary gives the ratios of the continuous batching issue:
// total tok/s at the largest level over the single-client rate (target >= 3),
// inter-token p50 at the largest level over the single-client one (<= 2), and
// TTFT p50 at the largest level (<= 1.5 s). --svg FILE draws the sweep
// (sweep-chart.js). With --json, stdout has one JSON line per level and round
// and a final sweep-summary line, and the tables go to stderr.
//
// The prompt ids come from the xorshift sequence `qwen3d bench` uses, so
// prefill does the same work. Greedy decoding may meet an end-of-sequence id
// before G tokens; the figures count the tokens the daemon reports. Speed is
// reported, never asserted.
//
// usage:
//   node bench/http-load.js --url http://127.0.0.1:8080 [--model-name NAME] [load options]
//   node bench/http-load.js --qwen3d ./qwen3d --model DIR [--threads T] [load options]
//   node bench/http-load.js --qwen3d ./qwen3d --model DIR --compare [--rounds K] [--threads T]
//   node bench/http-load.js --qwen3d ./qwen3d --model DIR --sweep 1,2,4,8 [--qwen3d-before BIN]
//        [--requests R] [--rounds K] [--threads T] [--svg FILE] [--json]
// load options: --concurrency N (4) --prompt-len P (32) --gen G (64) --requests R (16) --json
// --kv-type f32|f16|q8 starts the daemons (and --compare's bench) with that KV cache type.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFile } = require('child_process');
const hc = require('./http-common');
const { pct, sorted, median, fmt: f } = hc;
const chart = require('./sweep-chart');

const usage = hc.makeUsage('http-load',
  'usage: node http-load.js (--url URL | --qwen3d BIN --model DIR) [--threads T] [--parallel N]\n' +
  '         [--concurrency N] [--prompt-len P] [--gen G] [--requests R] [--json]\n' +
  '         [--kv-type f32|f16|q8] [--compare [--rounds K]]\n' +
  '         [--sweep 1,2,4,8 [--qwen3d-before BIN] [--rounds K] [--svg FILE]]');

function parseArgs(argv) {
  const o = hc.parseOptions(argv, {
    ints: { '--threads': 'threads' },
    pos: { '--concurrency': 'concurrency', '--prompt-len': 'promptLen', '--gen': 'gen', '--requests': 'requests',
      '--rounds': 'rounds', '--parallel': 'parallel' },
    strs: { '--url': 'url', '--qwen3d': 'qwen3d', '--model': 'model', '--model-name': 'modelName',
      '--qwen3d-before': 'before', '--svg': 'svg', '--kv-type': 'kvType' },
    lists: { '--sweep': 'sweep' },
    flags: { '--compare': 'compare', '--json': 'json' },
  }, { concurrency: 4, promptLen: null, gen: 64, requests: null, rounds: null, threads: 0, parallel: null,
    compare: false, json: false, url: null, qwen3d: null, model: null, modelName: null, before: null, svg: null,
    sweep: null, kvType: null }, usage);
  if (o.kvType && o.url) usage('--kv-type belongs to the daemons started here, not --url');
  if (!o.url && !(o.qwen3d && o.model)) usage('give --url, or --qwen3d and --model');
  if (o.compare && !(o.qwen3d && o.model)) usage('--compare needs --qwen3d and --model');
  if (o.compare && o.sweep) usage('--compare and --sweep are separate modes');
  if (!o.sweep && (o.before || o.svg)) usage('--qwen3d-before and --svg belong to --sweep');
  if (o.before && !(o.qwen3d && o.model)) usage('--qwen3d-before needs --qwen3d and --model');
  if (o.before && o.url) usage('--qwen3d-before needs the daemons started here, not --url');
  const sweepMax = o.sweep ? Math.max(...o.sweep) : 0;
  if (o.sweep && o.parallel && o.parallel < sweepMax) usage(`--parallel ${o.parallel} is below the largest level ${sweepMax}`);
  // Defaults per mode: the sweep's are the continuous batching issue's.
  o.promptLen = o.promptLen || (o.sweep ? 104 : 32);
  o.requests = o.requests || (o.sweep ? 32 : 16);
  o.rounds = o.rounds || (o.sweep ? 1 : 3);
  return o;
}

// ---- load --------------------------------------------------------------------------------

function completionBody(model, o, index) {
  return { model, prompt: hc.distinctPromptIds(o.promptLen, index), max_tokens: o.gen, temperature: 0, stream: true,
    stream_options: { include_usage: true } };
}

// N closed-loop clients send TOTAL requests: client c sends request numbers
// c, c + N, c + 2N, ... below TOTAL, each when its previous one has ended
// (PROMPT(j) gives the body of number j). Failed requests are kept as
// { error }. Resolves to { results, wall_ms }.
async function closedLoop(base, n, total, prompt) {
  const results = [];
  const t0 = performance.now();
  const client = async (c) => {
    for (let j = c; j < total; j += n) {
      try {
        results.push(await hc.streamRequest(base, '/v1/completions', prompt(j)));
      } catch (e) {
        results.push({ error: String(e.message || e) });
      }
    }
  };
  await Promise.all(Array.from({ length: n }, (_, c) => client(c)));
  return { results, wall_ms: performance.now() - t0 };
}

function summarize(load) {
  const rs = load.results.filter((x) => !x.error);
  const ttft = sorted(rs.map((x) => x.ttft_ms));
  const gaps = sorted(rs.flatMap((x) => x.gaps));
  const tokens = rs.reduce((a, x) => a + x.usage.completion_tokens, 0);
  const events = rs.reduce((a, x) => a + x.events, 0);
  const p = (a) => ({ p50: pct(a, 0.5), p90: pct(a, 0.9), p95: pct(a, 0.95), p99: pct(a, 0.99) });
  const errors = load.results.length - rs.length;
  return {
    requests: load.results.length,
    errors,
    first_error: errors ? load.results.find((x) => x.error).error : undefined,
    completion_tokens: tokens,
    text_events: events,
    wall_s: load.wall_ms / 1000,
    tokens_per_s: tokens / (load.wall_ms / 1000),
    ttft_ms: p(ttft),
    itl_ms: p(gaps),
    server_queue_ms_median: median(rs.map((x) => x.timings.queue_ms)),
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

function printLoad(o, s) {
  if (o.json) {
    console.log(JSON.stringify({ mode: 'load', concurrency: o.concurrency, prompt_len: o.promptLen, gen: o.gen, ...s }));
    return;
  }
  console.log(`${s.requests} requests, ${o.concurrency} concurrent, prompt ${o.promptLen} ids, max_tokens ${o.gen}: ` +
    `${s.completion_tokens} tokens in ${f(s.wall_s)} s = ${f(s.tokens_per_s, 1)} tokens/s` +
    (s.text_events !== s.completion_tokens ? ` (${s.text_events} text events)` : '') +
    (s.errors ? `; ${s.errors} failed, the first: ${s.first_error}` : ''));
  console.log(`  TTFT ms:            p50 ${f(s.ttft_ms.p50)}  p90 ${f(s.ttft_ms.p90)}  p99 ${f(s.ttft_ms.p99)}`);
  console.log(`  inter-token ms:     p50 ${f(s.itl_ms.p50)}  p90 ${f(s.itl_ms.p90)}  p99 ${f(s.itl_ms.p99)}`);
  console.log(`  daemon timings:     ttft_ms median ${f(s.server_ttft_ms_median)}, ` +
    `decode_tokens_per_s median ${f(s.server_decode_tokens_per_s_median)}; ` +
    `client TTFT - daemon ttft_ms median ${f(s.transport_ttft_ms_median)} ms, ` +
    `client / daemon decode rate median ${f(s.transport_decode_ratio_median, 3)}`);
}

function daemonArgs(o, parallel, queue) {
  const args = ['--parallel', String(parallel), '--queue', String(queue)];
  if (o.threads) args.push('--threads', String(o.threads));
  if (o.kvType) args.push('--kv-type', o.kvType);
  return args;
}

async function modelName(base) {
  const r = await fetch(`${base}/v1/models`);
  return (await r.json()).data[0].id;
}

async function load(o) {
  let d = null, base = o.url, model = o.modelName;
  if (!base) {
    d = await hc.startDaemon(o.qwen3d, o.model,
      daemonArgs(o, o.parallel || o.concurrency, Math.max(64, o.requests)));
    base = d.url;
    model = d.name;
  }
  try {
    model = model || await modelName(base);
    // One request first (prompt 0): the daemon's first generation is not measured.
    await closedLoop(base, 1, 1, (j) => completionBody(model, o, j));
    printLoad(o, summarize(await closedLoop(base, o.concurrency, o.requests, (j) => completionBody(model, o, 1 + j))));
  } finally {
    await hc.stopDaemon(d);
  }
}

// ---- compare mode ---------------------------------------------------------------

function engineBench(o) {
  const args = ['bench', '--model', o.model, '--json', '--prompt-len', String(o.promptLen), '--gen', String(o.gen),
    '--repeat', String(o.requests), '--contexts', 'none'];
  if (o.threads) args.push('--threads', String(o.threads));
  if (o.kvType) args.push('--kv-type', o.kvType);
  return new Promise((resolve, reject) => {
    execFile(o.qwen3d, args, { maxBuffer: 1 << 20 }, (e, stdout, stderr) => {
      if (e) return reject(new Error(`qwen3d bench: ${stderr || e.message}`));
      resolve(stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((x) => x.case === 'prompt'));
    });
  });
}

// R requests one at a time with the bench's own prompt ids.
async function sequentialBenchIds(base, model, o, r) {
  const body = { model, prompt: hc.benchPromptIds(o.promptLen), max_tokens: o.gen, temperature: 0, stream: true,
    stream_options: { include_usage: true } };
  const t0 = performance.now();
  const results = [];
  for (let i = 0; i < r; i++) results.push(await hc.streamRequest(base, '/v1/completions', body));
  return { results, wall_ms: performance.now() - t0 };
}

async function compare(o) {
  const extra = daemonArgs(o, 1, 64);
  if (hc.serveHasOption(o.qwen3d, '--no-prefix-cache')) extra.push('--no-prefix-cache');
  const d = await hc.startDaemon(o.qwen3d, o.model, extra);
  const rows = [];
  try {
    // One request first: the daemon's first generation is not measured.
    await sequentialBenchIds(d.url, d.name, o, 1);
    for (let k = 0; k < o.rounds; k++) {
      const e = await engineBench(o);
      const s = summarize(await sequentialBenchIds(d.url, d.name, o, o.requests));
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
    await hc.stopDaemon(d);
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
  console.log(`median of ${o.rounds} rounds: TTFT ratio ${f(summary.ttft_ratio_median, 3)} (target <= 1.05: ` +
    `${met(summary.ttft_target_met)}), decode tokens/s ratio ${f(summary.decode_ratio_median, 3)} (target >= 0.97: ` +
    `${met(summary.decode_target_met)})`);
  console.log(`  transport: +${f(summary.transport_ttft_ms_median)} ms TTFT, client/daemon decode rate ` +
    `${f(summary.transport_decode_ratio_median, 3)}`);
}

const met = (ok) => (ok === null ? 'n/a' : ok ? 'met' : 'missed');

// ---- sweep mode ---------------------------------------------------------------------

// The daemon's step-time totals by kind (qwen3d_step_seconds), or null from a daemon without them.
async function stepTotals(url) {
  let text;
  try {
    const r = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10000) });
    if (!r.ok) return null;
    text = await r.text();
  } catch {
    return null;
  }
  const t = {};
  for (const kind of ['decode', 'prompt']) {
    const value = (part) => {
      const m = text.match(new RegExp(`^qwen3d_step_seconds_${part}\\{(?:[^}]*,)?kind="${kind}"\\} (\\S+)$`, 'm'));
      return m ? Number(m[1]) : NaN;
    };
    t[kind] = { sum: value('sum'), count: value('count') };
    if (!Number.isFinite(t[kind].sum) || !Number.isFinite(t[kind].count)) return null;
  }
  return t;
}

// Mean step of each kind between two stepTotals, in ms (null where unknown or no such step ran).
function stepMeans(a, b) {
  const mean = (k) => (a && b && b[k].count > a[k].count
    ? (1000 * (b[k].sum - a[k].sum)) / (b[k].count - a[k].count) : null);
  return { daemon_decode_step_ms: mean('decode'), daemon_prompt_step_ms: mean('prompt') };
}

// The figures of one level, from one round (STEPS: stepMeans over its run).
function levelFigures(s, steps) {
  return {
    requests: s.requests, errors: s.errors, completion_tokens: s.completion_tokens, text_events: s.text_events,
    wall_s: s.wall_s, tokens_per_s: s.tokens_per_s, itl_p50_ms: s.itl_ms.p50, itl_p95_ms: s.itl_ms.p95,
    ttft_p50_ms: s.ttft_ms.p50, ttft_p95_ms: s.ttft_ms.p95, daemon_queue_ms_p50: s.server_queue_ms_median,
    daemon_ttft_ms_p50: s.server_ttft_ms_median, ...steps,
  };
}

// Per level, the median over rounds of each figure (counts are summed).
function combineRounds(rounds) {
  const out = {};
  for (const k of Object.keys(rounds[0])) {
    const v = rounds.map((r) => r[k]);
    out[k] = ['requests', 'errors', 'completion_tokens', 'text_events'].includes(k)
      ? v.reduce((a, x) => a + x, 0) : v.includes(null) ? null : median(v);
  }
  return out;
}

// The issue's ratios for one build: largest level against one client.
function ratios(rows, levels) {
  const one = rows.find((r) => r.clients === 1);
  const top = rows.find((r) => r.clients === Math.max(...levels));
  const q = (a, b) => (one && top ? a / b : NaN);
  const r = {
    top_clients: top ? top.clients : null,
    tokens_per_s_top_over_one: q(top && top.tokens_per_s, one && one.tokens_per_s),
    itl_p50_top_over_one: q(top && top.itl_p50_ms, one && one.itl_p50_ms),
    ttft_p50_top_ms: top ? top.ttft_p50_ms : NaN,
  };
  r.tokens_per_s_target_met = Number.isFinite(r.tokens_per_s_top_over_one) ? r.tokens_per_s_top_over_one >= 3 : null;
  r.itl_target_met = Number.isFinite(r.itl_p50_top_over_one) ? r.itl_p50_top_over_one <= 2 : null;
  r.ttft_target_met = Number.isFinite(r.ttft_p50_top_ms) ? r.ttft_p50_top_ms <= 1500 : null;
  return r;
}

const stepCell = (ms) => (ms === null || ms === undefined ? '-' : f(ms, 2));

// The sweep's tables, through LOG (console.log, or console.error beside --json).
function printSweep(sum, log) {
  const m = sum.meta;
  log(`\n${m.cpu}, kernels ${m.kernels}, ${m.threads} threads, KV cache ${m.kv_type}, model ${m.model_name}` +
    (m.geometry ? ` (${m.geometry})` : '') + `; prompts of ${m.prompt_len} distinct ids, ${m.gen} generated tokens, ` +
    `greedy, streaming /v1/completions; ${m.requests_per_level} requests per level, ${m.rounds} round(s)` +
    (m.rounds > 1 ? ' (medians of the rounds)' : '') + '.');
  if (sum.builds.length > 1) log(`order: ${m.order}`);
  log('\n| qwen3d | clients | requests | errors | tokens | wall s | total tok/s | ITL p50 ms | ITL p95 ms | ' +
    'TTFT p50 ms | TTFT p95 ms | decode step ms | prompt step ms |');
  log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const b of sum.builds) {
    for (const r of b.rows) {
      log(`| ${b.label} | ${r.clients} | ${r.requests} | ${r.errors} | ${r.completion_tokens}` +
        (r.text_events !== r.completion_tokens ? ` (${r.text_events} events)` : '') +
        ` | ${f(r.wall_s, 1)} | ${f(r.tokens_per_s, 1)} | ${f(r.itl_p50_ms, 1)} | ${f(r.itl_p95_ms, 1)} | ` +
        `${f(r.ttft_p50_ms, 0)} | ${f(r.ttft_p95_ms, 0)} | ${stepCell(r.daemon_decode_step_ms)} | ` +
        `${stepCell(r.daemon_prompt_step_ms)} |`);
    }
  }
  const top = sum.builds[0].ratios.top_clients;
  log(`\n| ratio | ${sum.builds.map((b) => b.label).join(' | ')} | target |`);
  log(`| --- | ${sum.builds.map(() => '---:').join(' | ')} | --- |`);
  const line = (name, key, d, target, metKey) => log(`| ${name} | ` +
    sum.builds.map((b) => `${f(b.ratios[key], d)}${b.label === 'after' || sum.builds.length === 1
      ? ` (${met(b.ratios[metKey])})` : ''}`).join(' | ') + ` | ${target} |`);
  line(`total tok/s at ${top} clients / at 1`, 'tokens_per_s_top_over_one', 2, '>= 3', 'tokens_per_s_target_met');
  line(`ITL p50 at ${top} clients / at 1`, 'itl_p50_top_over_one', 2, '<= 2', 'itl_target_met');
  line(`TTFT p50 at ${top} clients, ms`, 'ttft_p50_top_ms', 0, '<= 1500', 'ttft_target_met');
  if (sum.after_over_before) {
    log(`\nafter / before, total tok/s per level: ` +
      sum.after_over_before.map((x) => `${x.clients}: ${f(x.tokens_per_s, 2)}`).join(', '));
  }
  const errors = sum.builds.reduce((a, b) => a + b.rows.reduce((x, r) => x + r.errors, 0), 0);
  if (errors) log(`\n${errors} request(s) failed; the first: ${sum.first_error}`);
}

async function sweep(o) {
  const levels = o.sweep;
  const maxC = Math.max(...levels);
  const perLevel = levels.map((c) => c * Math.ceil(o.requests / c));
  const perRound = perLevel.reduce((a, x) => a + x, 0);
  // Prompt numbers: the warm-up takes 0..maxC-1, then each round and level
  // its own range, the same for both builds (each daemon has its own cache).
  const first = (round, li) => maxC + round * perRound + perLevel.slice(0, li).reduce((a, x) => a + x, 0);

  const builds = [];
  if (o.before) builds.push({ label: 'before', bin: o.before });
  builds.push({ label: o.before ? 'after' : 'qwen3d', bin: o.qwen3d, url: o.url });
  const t0 = performance.now();
  try {
    for (const b of builds) {
      if (!b.url) {
        b.daemon = await hc.startDaemon(b.bin, o.model, daemonArgs(o, o.parallel || maxC, Math.max(64, maxC)));
        b.url = b.daemon.url;
        b.model = b.daemon.name;
        b.threads = b.daemon.threads;
      } else {
        b.model = o.modelName || await modelName(b.url);
      }
      b.rounds = levels.map(() => []);
    }
    for (const b of builds) {
      const w = summarize(await closedLoop(b.url, maxC, maxC, (j) => completionBody(b.model, o, j)));
      if (w.errors) throw new Error(`the warm-up of ${b.label} failed: ${w.first_error}`);
    }
    for (let r = 0; r < o.rounds; r++) {
      for (let li = 0; li < levels.length; li++) {
        const step = r * levels.length + li;
        const order = step % 2 === 0 ? builds : builds.slice().reverse();
        for (const b of order) {
          const before = await stepTotals(b.url);
          const run = await closedLoop(b.url, levels[li], perLevel[li],
            (j) => completionBody(b.model, o, first(r, li) + j));
          const steps = stepMeans(before, await stepTotals(b.url));
          const s = summarize(run);
          b.rounds[li].push(levelFigures(s, steps));
          if (s.errors && !b.first_error) b.first_error = s.first_error;
          const rec = { mode: 'sweep-level', build: b.label, round: r + 1, clients: levels[li],
            ...levelFigures(s, steps) };
          if (o.json) console.log(JSON.stringify(rec));
          else console.error(`round ${r + 1}, ${b.label}, ${levels[li]} clients: ${f(s.tokens_per_s, 1)} tok/s, ` +
            `ITL p50 ${f(s.itl_ms.p50, 1)} ms, TTFT p50 ${f(s.ttft_ms.p50, 0)} ms, ${f(s.wall_s, 1)} s` +
            (steps.daemon_decode_step_ms !== null ? `, decode step ${f(steps.daemon_decode_step_ms, 2)} ms` : '') +
            (s.errors ? `, ${s.errors} errors` : ''));
        }
      }
    }
  } finally {
    for (const b of builds) await hc.stopDaemon(b.daemon);
  }
  const info = hc.machineInfo(o.qwen3d, o.model);
  const summary = {
    mode: 'sweep-summary',
    meta: {
      cpu: info.cpu, cpu_features: info.cpu_features, kernels: info.kernels,
      threads: builds[builds.length - 1].threads || o.threads || 'unknown', kv_type: o.kvType || 'f32 (default)',
      model_name: builds[builds.length - 1].model, model: o.model ? path.resolve(o.model) : null,
      geometry: info.geometry, prompt_len: o.promptLen, gen: o.gen, levels, requests_per_level: perLevel,
      rounds: o.rounds, order: builds.length > 1
        ? 'both daemons loaded; per level before then after at even steps, after then before at odd steps ' +
          '(step = round * levels + level index)' : 'one daemon',
      wall_s: (performance.now() - t0) / 1000,
    },
    builds: builds.map((b) => {
      const rows = levels.map((c, li) => ({ clients: c, ...combineRounds(b.rounds[li]) }));
      return { label: b.label, bin: b.bin ? path.resolve(b.bin) : b.url, rows, ratios: ratios(rows, levels) };
    }),
    first_error: builds.map((b) => b.first_error).find(Boolean),
  };
  // requests_per_level as printed: a single number when all levels agree.
  if (perLevel.every((x) => x === perLevel[0])) summary.meta.requests_per_level = perLevel[0];
  if (builds.length > 1) {
    const [bef, aft] = summary.builds;
    summary.after_over_before = levels.map((c, li) => ({ clients: c,
      tokens_per_s: aft.rows[li].tokens_per_s / bef.rows[li].tokens_per_s,
      itl_p50: aft.rows[li].itl_p50_ms / bef.rows[li].itl_p50_ms }));
  }
  if (o.svg) fs.writeFileSync(o.svg, chart.sweepSvg(summary));
  if (o.json) console.log(JSON.stringify(summary));
  printSweep(summary, o.json ? console.error : console.log);
  console.error(`sweep took ${f(summary.meta.wall_s, 0)} s` + (o.svg ? `; chart written to ${o.svg}` : ''));
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.compare) return compare(o);
  if (o.sweep) return sweep(o);
  return load(o);
}

main().catch((e) => {
  console.error(`http-load: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
