#!/usr/bin/env node
// Side-by-side: qwen3d and ONNX Runtime on the same model folder, the same
// thread count and the same token ids, alternating runs so that both see the
// same machine conditions; reports medians over the runs and their ratios
// (above 1 means qwen3d is faster). Never asserts on speed.
//
// Usage: compare-ort.js --qwen3d BIN --model DIR [--runs N] [--threads N]
//                       [--prompt-len 32] [--gen 128] [--contexts 1024,4096]
//                       [--context-steps N] [--repeat R] [--kv-mode M] [--kv-type T[,T2...]]
//                       [--ort-kv contract|share] [--ort-logits all|last] [--json]
// Each run is one process per runtime that loads the model once and measures
// every prompt case R times (default 3), reporting its median: the steady
// state of a server that keeps the model loaded (the first request after a
// load also pays for first-touch page faults in both runtimes).
// --ort-kv and --ort-logits choose ONNX Runtime's configuration (ort-bench.js
// --kv, --logits); the text output states under the table what work each
// runtime does, and --json rows carry ort_kv and ort_logits.
// --kv-type with a list (f32,f16) runs qwen3d once per KV type in every run,
// next to each other; the first type's figures keep the qwen3d_ names, each
// further type's carry its name after them (qwen3d_f16_decode_tokens_per_s).
// NODE_PATH must reach onnxruntime-node (tests/npm/node_modules of a build tree).
'use strict';

const { spawnSync } = require('child_process');
const path = require('path');
const { ortConditions } = require('./ort-notes.js');

function fail(msg) {
  process.stderr.write(`compare-ort: ${msg}\n`);
  process.exit(1);
}

const o = { runs: 5, repeat: '3', threads: '1', prompt: '32', gen: '128', contexts: '1024,4096', steps: '16',
  kvMode: 'persistent', kvType: 'f32', ortKv: 'contract', ortLogits: 'all', json: false };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const v = () => (i + 1 < argv.length ? argv[++i] : fail(`${argv[i]} needs a value`));
  switch (argv[i]) {
    case '--qwen3d': o.bin = v(); break;
    case '--model': o.model = v(); break;
    case '--runs': o.runs = Number(v()); break;
    case '--repeat': o.repeat = v(); break;
    case '--threads': o.threads = v(); break;
    case '--prompt-len': o.prompt = v(); break;
    case '--gen': o.gen = v(); break;
    case '--contexts': o.contexts = v(); break;
    case '--context-steps': o.steps = v(); break;
    case '--kv-mode': o.kvMode = v(); break;
    case '--kv-type': o.kvType = v(); break;
    case '--ort-kv': o.ortKv = v(); break;
    case '--ort-logits': o.ortLogits = v(); break;
    case '--json': o.json = true; break;
    default: fail(`unknown argument "${argv[i]}"`);
  }
}
if (!o.bin || !o.model) fail('--qwen3d BIN and --model DIR are required');
const kvTypes = o.kvType.split(',');
if (kvTypes.some((t) => !t) || new Set(kvTypes).size !== kvTypes.length)
  fail(`--kv-type wants one KV type or a list of distinct ones, not "${o.kvType}"`);
// The samples' runtime key of each KV type: the first is plain qwen3d.
const qName = (i) => (i ? `qwen3d_${kvTypes[i]}` : 'qwen3d');

const common = ['--model', o.model, '--prompt-len', o.prompt, '--gen', o.gen, '--threads', o.threads,
  '--repeat', o.repeat, '--contexts', o.contexts, '--context-steps', o.steps];

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) fail(`${path.basename(cmd)} ${args.join(' ')} failed: ${(r.stderr || '').trim().split('\n').pop()}`);
  return r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

const key = (c) => (c.case === 'prompt' ? `prompt ${c.prompt_len}` : `context ${c.context}`);
const samples = {}; // key -> runtime -> metric -> [values]
function add(runtime, cases) {
  for (const c of cases) {
    const k = key(c);
    samples[k] = samples[k] || { onnxruntime: {}, ...Object.fromEntries(kvTypes.map((t, i) => [qName(i), {}])) };
    for (const m of ['ttft_ms', 'prefill_tokens_per_s', 'decode_ms_median', 'decode_tokens_per_s', 'load_ms', 'rss_bytes',
      'prepared_bytes'])
      if (typeof c[m] === 'number') (samples[k][runtime][m] = samples[k][runtime][m] || []).push(c[m]);
  }
}

for (let r = 0; r < o.runs; r++) {
  // alternate which runtime goes first
  const q = () => kvTypes.forEach((t, i) => add(qName(i), run(o.bin, ['bench', '--json', '--kv-mode', o.kvMode, '--kv-type', t,
    ...common])));
  const x = () => add('onnxruntime', run(process.execPath, [path.join(__dirname, 'ort-bench.js'), '--kv', o.ortKv,
    '--logits', o.ortLogits, ...common]));
  if (r % 2) { x(); q(); } else { q(); x(); }
}

const med = (a) => { if (!a || !a.length) return null; const s = [...a].sort((p, q) => p - q); return s[Math.floor(s.length / 2)]; };
const rows = [];
for (const [k, v] of Object.entries(samples)) {
  const row = { case: k, threads: Number(o.threads), runs: o.runs, kv_mode: o.kvMode, kv_type: kvTypes[0], ort_kv: o.ortKv,
    ort_logits: o.ortLogits };
  if (kvTypes.length > 1) row.kv_types = kvTypes;
  for (const m of ['decode_tokens_per_s', 'prefill_tokens_per_s', 'ttft_ms', 'decode_ms_median', 'rss_bytes', 'load_ms']) {
    const a = med(v.qwen3d[m]), b = med(v.onnxruntime[m]);
    if (a === null || b === null) continue;
    row[`qwen3d_${m}`] = a;
    row[`onnxruntime_${m}`] = b;
  }
  for (let i = 1; i < kvTypes.length; i++)
    for (const m of ['decode_tokens_per_s', 'decode_ms_median', 'ttft_ms']) {
      const a = med(v[qName(i)][m]);
      if (a !== null) row[`${qName(i)}_${m}`] = a;
    }
  if (med(v.qwen3d.prepared_bytes) !== null) row.qwen3d_prepared_bytes = med(v.qwen3d.prepared_bytes);
  if (row.qwen3d_decode_tokens_per_s) row.decode_speedup = row.qwen3d_decode_tokens_per_s / row.onnxruntime_decode_tokens_per_s;
  if (row.qwen3d_prefill_tokens_per_s) row.prefill_speedup = row.qwen3d_prefill_tokens_per_s / row.onnxruntime_prefill_tokens_per_s;
  if (row.qwen3d_ttft_ms) row.ttft_speedup = row.onnxruntime_ttft_ms / row.qwen3d_ttft_ms;
  rows.push(row);
}
if (o.json) {
  for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
} else {
  const f = (x, d = 1) => (x === undefined || x === null ? '-' : x.toFixed(d));
  console.log(`model ${o.model}, ${o.threads} thread(s), ${o.runs} alternating runs of ${o.repeat} repeats, medians; qwen3d kv ${o.kvMode}/${o.kvType}`);
  console.log('case            decode tok/s (qwen3d / ORT = x)     prefill tok/s (qwen3d / ORT = x)    ttft ms (qwen3d / ORT = x)');
  for (const r of rows)
    console.log(`${r.case.padEnd(15)} ${f(r.qwen3d_decode_tokens_per_s).padStart(8)} / ${f(r.onnxruntime_decode_tokens_per_s).padStart(8)} = ${f(r.decode_speedup, 2).padStart(5)}x` +
      `     ${f(r.qwen3d_prefill_tokens_per_s).padStart(8)} / ${f(r.onnxruntime_prefill_tokens_per_s).padStart(8)} = ${f(r.prefill_speedup, 2).padStart(5)}x` +
      `     ${f(r.qwen3d_ttft_ms).padStart(8)} / ${f(r.onnxruntime_ttft_ms).padStart(8)} = ${f(r.ttft_speedup, 2).padStart(5)}x` +
      kvTypes.slice(1).map((t, i) => `     kv ${t} decode ${f(r[`${qName(i + 1)}_decode_tokens_per_s`])} tok/s`).join(''));
  console.log(ortConditions(o.ortKv, o.ortLogits).join('\n'));
}
