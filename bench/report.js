#!/usr/bin/env node
// The kernel figures in one run, as a markdown table: for each model and
// thread count, qwen3d against ONNX Runtime side by side (compare-ort.js:
// alternating runs, medians) for decode (prompt 32, 128 generated) and time
// to first token (prompt 512), the share of the measured memory bandwidth
// that decode streams weights at, load time, and prepared weight bytes over
// the serialized INT4 weights and scales. Never asserts on speed.
//
// Usage (from a build tree, NODE_PATH reaching onnxruntime-node):
//   node ../bench/report.js --qwen3d ./qwen3d --bw-probe bench/bw_probe \
//       --case m06:1 --case m06:2 --case m4b:2 [--runs 3] [--repeat 3] \
//       [--pairs 5] [--serve-model DIR] [--serve-runs 5]
//       [--ort-kv contract|share] [--ort-logits all|last]
// A case is MODEL_DIR:THREADS. --serve-model (a folder with a tokenizer)
// adds load-to-ready: `qwen3d serve` started and /health polled until 200.
// --ort-kv and --ort-logits choose ONNX Runtime's configuration (see
// ort-bench.js); the sentences under the table say what work each runtime
// does in the figures above it.
//
// Bandwidth efficiency = prepared weight bytes per decoded token / median
// decode step / bw_probe's sequential read rate at the same thread count
// (1 GiB buffer, huge pages requested). On shared machines that rate drifts
// by tens of percent within minutes, so a probe taken at another time says
// little: the share is measured in --pairs rounds of its own, each a
// `qwen3d bench` decode run (prompt 32, 128 generated) between two probes,
// its step set against the mean of those two probes; the table gives the
// median share over the rounds and their range. The step also reads the KV
// cache and the embedding row, so this slightly understates the weight
// stream's rate.
'use strict';

const { spawn, spawnSync } = require('child_process');
const http = require('http');
const path = require('path');
const { ortConditions } = require('./ort-notes.js');

function fail(msg) {
  process.stderr.write(`report: ${msg}\n`);
  process.exit(1);
}

const o = { cases: [], runs: '3', repeat: '3', pairs: 5, serveRuns: 5, ortKv: 'contract', ortLogits: 'all' };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const v = () => (i + 1 < argv.length ? argv[++i] : fail(`${argv[i]} needs a value`));
  switch (argv[i]) {
    case '--qwen3d': o.bin = v(); break;
    case '--bw-probe': o.probe = v(); break;
    case '--case': {
      const c = v(), k = c.lastIndexOf(':');
      if (k < 1 || !/^\d+$/.test(c.slice(k + 1))) fail(`--case wants MODEL_DIR:THREADS, not "${c}"`);
      o.cases.push({ model: c.slice(0, k), threads: c.slice(k + 1) });
      break;
    }
    case '--runs': o.runs = v(); break;
    case '--repeat': o.repeat = v(); break;
    case '--pairs': o.pairs = Number(v()); break;
    case '--serve-model': o.serveModel = v(); break;
    case '--serve-runs': o.serveRuns = Number(v()); break;
    case '--ort-kv': o.ortKv = v(); break;
    case '--ort-logits': o.ortLogits = v(); break;
    default: fail(`unknown argument "${argv[i]}"`);
  }
}
if (!o.bin || !o.probe || !o.cases.length) fail('--qwen3d BIN, --bw-probe BIN and at least one --case are required');
if (!Number.isInteger(o.pairs) || o.pairs < 1) fail('--pairs wants a whole number of rounds, at least 1');

// The middle value, or the mean of the two middle ones; nulls (failed runs) are left out.
const median = (a) => {
  const s = a.filter((x) => x !== null).sort((x, y) => x - y), m = s.length >> 1;
  if (!s.length) return null;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function run(cmd, args) {
  process.stderr.write(`report: ${path.basename(cmd)} ${args.join(' ')}\n`);
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} failed: ${(r.stderr || '').trim().split('\n').pop()}`);
  return r.stdout;
}

// bw_probe's sequential read rate at THREADS threads: the "seq" column of
// its "threads seq seq+pf 4streams memset" row.
function probe(threads) {
  const out = run(o.probe, ['--mib', '1024', '--threads', threads, '--huge', '1']);
  for (const line of out.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 2 && f[0] === String(threads) && !Number.isNaN(Number(f[1]))) return Number(f[1]);
  }
  return fail(`bw_probe printed no rate for ${threads} thread(s)`);
}

function compare(model, threads, prompt, gen) {
  const out = run(process.execPath, [path.join(__dirname, 'compare-ort.js'), '--qwen3d', o.bin, '--model', model,
    '--threads', threads, '--runs', o.runs, '--repeat', o.repeat, '--prompt-len', String(prompt), '--gen', String(gen),
    '--contexts', 'none', '--ort-kv', o.ortKv, '--ort-logits', o.ortLogits, '--json']);
  const rows = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const row = rows.find((r) => r.case === `prompt ${prompt}`);
  if (!row) fail(`compare-ort.js gave no "prompt ${prompt}" row for ${model}`);
  return row;
}

// The share of the probed bandwidth that decode streams weights at, in
// o.pairs rounds of probe / decode run / probe: per round, prepared bytes /
// median step / mean of the two probes around it (each probe serves the
// rounds on both sides of it).
function efficiency(model, threads) {
  const probes = [probe(threads)], rounds = [];
  for (let i = 0; i < o.pairs; i++) {
    const out = run(o.bin, ['bench', '--json', '--model', model, '--threads', threads, '--prompt-len', '32', '--gen', '128',
      '--contexts', 'none', '--repeat', o.repeat]);
    const c = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.case === 'prompt');
    if (!c || !(c.decode_ms_median > 0) || !(c.prepared_bytes > 0)) fail(`qwen3d bench gave no decode step for ${model}`);
    probes.push(probe(threads));
    const gbs = c.prepared_bytes / (c.decode_ms_median / 1000) / 1e9;
    rounds.push({ gbs, share: gbs / ((probes[i] + probes[i + 1]) / 2) });
  }
  const shares = rounds.map((r) => r.share);
  return { share: median(shares), lo: Math.min(...shares), hi: Math.max(...shares), gbs: median(rounds.map((r) => r.gbs)),
    probe: median(probes), all: shares };
}

// Serialized INT4 weights, scales and zero points of the MatMulNBits nodes, from inspect --json.
function serializedInt4(model) {
  const j = JSON.parse(run(o.bin, ['inspect', '--model', model, '--json']));
  const b = j.weight_bytes || {};
  const q = (b.int4_weights || 0) + (b.scales || 0) + (b.zero_points || 0);
  return q > 0 ? q : null;
}

function readyOnce(model, port) {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(o.bin, ['serve', '--model', model, '--port', String(port), '--threads', '2'],
      { stdio: ['ignore', 'ignore', 'ignore'] });
    let done = false;
    const finish = (ms) => {
      if (done) return;
      done = true;
      child.kill('SIGTERM');
      child.on('exit', () => resolve(ms));
    };
    child.on('exit', () => { if (!done) { done = true; resolve(null); } });
    const poll = () => {
      if (done) return;
      const req = http.get({ host: '127.0.0.1', port, path: '/health', timeout: 1000 }, (res) => {
        res.resume();
        if (res.statusCode === 200) finish(Number(process.hrtime.bigint() - t0) / 1e6);
        else setTimeout(poll, 5);
      });
      req.on('error', () => setTimeout(poll, 5));
      req.on('timeout', () => req.destroy());
    };
    setTimeout(() => finish(null), 60000);
    poll();
  });
}

async function main() {
  const lines = [];
  lines.push('| model | threads | decode tok/s qwen3d / ORT (x) | TTFT 512 ms qwen3d / ORT (ratio) | weight stream GB/s, median | share of probe, median (range) | probe GB/s, median | load ms qwen3d / ORT | prepared / serialized INT4 |');
  lines.push('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const detail = [];
  for (const c of o.cases) {
    const d = compare(c.model, c.threads, 32, 128);
    const e = efficiency(c.model, c.threads);
    const t = compare(c.model, c.threads, 512, 2);
    const bytes = d.qwen3d_prepared_bytes;
    const ser = serializedInt4(c.model);
    const f = (x, n = 1) => (x === null || x === undefined ? '-' : x.toFixed(n));
    const pct = (x) => f(100 * x, 0) + '%';
    lines.push(`| ${path.basename(c.model)} | ${c.threads} | ${f(d.qwen3d_decode_tokens_per_s)} / ${f(d.onnxruntime_decode_tokens_per_s)} (${f(d.decode_speedup, 2)}x)` +
      ` | ${f(t.qwen3d_ttft_ms, 0)} / ${f(t.onnxruntime_ttft_ms, 0)} (${f(t.qwen3d_ttft_ms / t.onnxruntime_ttft_ms, 2)})` +
      ` | ${f(e.gbs, 2)} | ${pct(e.share)} (${pct(e.lo)}-${pct(e.hi)}) | ${f(e.probe, 2)}` +
      ` | ${f(d.qwen3d_load_ms, 0)} / ${f(d.onnxruntime_load_ms, 0)}` +
      ` | ${bytes && ser ? (bytes / ser).toFixed(3) : '-'} (${bytes || '-'} / ${ser || '-'}) |`);
    detail.push(`${path.basename(c.model)} at ${c.threads} thread(s), share per round: ${e.all.map(pct).join(', ')}`);
  }
  lines.push('');
  lines.push(...ortConditions(o.ortKv, o.ortLogits));
  lines.push('');
  lines.push(...detail);
  if (o.serveModel) {
    const ms = [];
    for (let i = 0; i < o.serveRuns; i++) ms.push(await readyOnce(o.serveModel, 18700 + i));
    lines.push('');
    lines.push(`load to ready (qwen3d serve --threads 2, start to first /health 200), ${o.serveRuns} starts: ` +
      `median ${median(ms) === null ? '-' : median(ms).toFixed(0)} ms, all: ${ms.map((x) => (x === null ? 'failed' : x.toFixed(0))).join(', ')}`);
  }
  lines.push('');
  lines.push(`runs ${o.runs} alternating x ${o.repeat} repeats per case (compare-ort.js), medians; ` +
    `bandwidth share over ${o.pairs} rounds of probe / decode / probe`);
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((e) => fail(e && e.message ? e.message : e));
