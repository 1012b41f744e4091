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
//       [--serve-model DIR] [--serve-runs 5]
// A case is MODEL_DIR:THREADS. --serve-model (a folder with a tokenizer)
// adds load-to-ready: `qwen3d serve` started and /health polled until 200.
//
// Bandwidth efficiency = prepared weight bytes per decoded token / median
// decode step / bw_probe's sequential read rate at the same thread count
// (1 GiB buffer, huge pages requested), probed just before and just after
// that case's decode runs and averaged: on shared machines the rate drifts
// by tens of percent within minutes, so a probe taken at another time says
// little. The step also reads the KV cache and the embedding row, so this
// slightly understates the weight stream's rate.
'use strict';

const { spawn, spawnSync } = require('child_process');
const http = require('http');
const path = require('path');

function fail(msg) {
  process.stderr.write(`report: ${msg}\n`);
  process.exit(1);
}

const o = { cases: [], runs: '3', repeat: '3', serveRuns: 5 };
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
    case '--serve-model': o.serveModel = v(); break;
    case '--serve-runs': o.serveRuns = Number(v()); break;
    default: fail(`unknown argument "${argv[i]}"`);
  }
}
if (!o.bin || !o.probe || !o.cases.length) fail('--qwen3d BIN, --bw-probe BIN and at least one --case are required');

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
    '--contexts', 'none', '--json']);
  const rows = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const row = rows.find((r) => r.case === `prompt ${prompt}`);
  if (!row) fail(`compare-ort.js gave no "prompt ${prompt}" row for ${model}`);
  return row;
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

const median = (a) => { const s = a.filter((x) => x !== null).sort((x, y) => x - y); return s.length ? s[s.length >> 1] : null; };

async function main() {
  const lines = [];
  lines.push('| model | threads | decode tok/s qwen3d / ORT (x) | TTFT 512 ms qwen3d / ORT (ratio) | weight stream GB/s (share of probe; probe before, after) | load ms qwen3d / ORT | prepared / serialized INT4 |');
  lines.push('| --- | --- | --- | --- | --- | --- | --- |');
  for (const c of o.cases) {
    const before = probe(c.threads);
    const d = compare(c.model, c.threads, 32, 128);
    const after = probe(c.threads);
    const bw = (before + after) / 2;
    const t = compare(c.model, c.threads, 512, 2);
    const bytes = d.qwen3d_prepared_bytes;
    const gbs = bytes && d.qwen3d_decode_ms_median ? bytes / (d.qwen3d_decode_ms_median / 1000) / 1e9 : null;
    const ser = serializedInt4(c.model);
    const f = (x, n = 1) => (x === null || x === undefined ? '-' : x.toFixed(n));
    lines.push(`| ${path.basename(c.model)} | ${c.threads} | ${f(d.qwen3d_decode_tokens_per_s)} / ${f(d.onnxruntime_decode_tokens_per_s)} (${f(d.decode_speedup, 2)}x)` +
      ` | ${f(t.qwen3d_ttft_ms, 0)} / ${f(t.onnxruntime_ttft_ms, 0)} (${f(t.qwen3d_ttft_ms / t.onnxruntime_ttft_ms, 2)})` +
      ` | ${f(gbs, 2)} (${gbs ? f(100 * gbs / bw, 0) : '-'}%; ${f(before, 2)}, ${f(after, 2)})` +
      ` | ${f(d.qwen3d_load_ms, 0)} / ${f(d.onnxruntime_load_ms, 0)}` +
      ` | ${bytes && ser ? (bytes / ser).toFixed(3) : '-'} (${bytes || '-'} / ${ser || '-'}) |`);
  }
  if (o.serveModel) {
    const ms = [];
    for (let i = 0; i < o.serveRuns; i++) ms.push(await readyOnce(o.serveModel, 18700 + i));
    lines.push('');
    lines.push(`load to ready (qwen3d serve --threads 2, start to first /health 200), ${o.serveRuns} starts: ` +
      `median ${median(ms) === null ? '-' : median(ms).toFixed(0)} ms, all: ${ms.map((x) => (x === null ? 'failed' : x.toFixed(0))).join(', ')}`);
  }
  lines.push('');
  lines.push(`runs ${o.runs} alternating x ${o.repeat} repeats per case (compare-ort.js), medians`);
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((e) => fail(e && e.message ? e.message : e));
