#!/usr/bin/env node
// ONNX Runtime's side of the benchmarks: the same cases as `qwen3d bench`, on
// the same model folder, through onnxruntime-node with the graph's tensor
// contract (present fed back as past, which copies the whole past every step,
// as ONNX Runtime without GenAI's shared buffer does).
//
// Usage: ort-bench.js --model DIR [--prompt-len 32,512] [--gen 128] [--threads N]
//                     [--repeat R] [--contexts 128,1024,4096] [--context-steps N]
// Prints one JSON object per case with the field names `qwen3d bench --json` uses.
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function fail(msg) {
  process.stderr.write(`ort-bench: ${String(msg).replace(/\s+/g, ' ')}\n`);
  process.exit(1);
}

function list(s) {
  if (s === 'none') return [];
  return s.split(',').map((t) => {
    if (!/^\d+$/.test(t)) fail(`"${s}" is not a list of integers`);
    return Number(t);
  });
}

function args(argv) {
  const o = { prompts: [32, 512], gen: 128, threads: 1, repeat: 3, contexts: [128, 1024, 4096], contextSteps: 32 };
  for (let i = 0; i < argv.length; i++) {
    const v = () => (i + 1 < argv.length ? argv[++i] : fail(`${argv[i]} needs a value`));
    switch (argv[i]) {
      case '--model': o.model = v(); break;
      case '--prompt-len': o.prompts = list(v()); break;
      case '--gen': o.gen = Number(v()); break;
      case '--threads': o.threads = Number(v()); break;
      case '--repeat': o.repeat = Number(v()); break;
      case '--contexts': o.contexts = list(v()); break;
      case '--context-steps': o.contextSteps = Number(v()); break;
      default: fail(`unknown argument "${argv[i]}"`);
    }
  }
  if (!o.model) fail('--model DIR is required');
  return o;
}

const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor((s.length - 1) / 2 + 0.5)] : 0; };
const p90 = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(0.9 * (s.length - 1) + 0.5))] : 0; };

function promptIds(n, vocab) {
  // the same xorshift sequence as qwen3d bench, so both run the same tokens
  let x = 88172645463325252n;
  const span = BigInt(Math.min(vocab, 151643));
  const ids = new BigInt64Array(n);
  const mask = (1n << 64n) - 1n;
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & mask;
    x ^= x >> 7n;
    x ^= (x << 17n) & mask;
    ids[i] = x % span;
  }
  return ids;
}

function argmax(data, off, V) {
  let best = 0, bv = -Infinity;
  for (let i = 0; i < V; i++) if (data[off + i] > bv) { bv = data[off + i]; best = i; }
  return best;
}

async function main() {
  const o = args(process.argv.slice(2));
  const cfg = JSON.parse(fs.readFileSync(path.join(o.model, 'genai_config.json'), 'utf8'));
  const dec = cfg.model.decoder;
  const L = dec.num_hidden_layers, Nkv = dec.num_key_value_heads, H = dec.head_size, V = cfg.model.vocab_size;
  const names = dec.inputs, outs = dec.outputs;
  const t0 = now();
  const session = await ort.InferenceSession.create(path.join(o.model, dec.filename || 'model.onnx'), {
    intraOpNumThreads: o.threads, interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3,
  });
  const loadMs = now() - t0;

  const pastName = (kind, l) => (kind === 'key' ? names.past_key_names : names.past_value_names).replace('%d', l);
  const presName = (kind, l) => (kind === 'key' ? outs.present_key_names : outs.present_value_names).replace('%d', l);

  async function step(ids, past, pastLen) {
    const feeds = {};
    feeds[names.input_ids] = new ort.Tensor('int64', ids, [1, ids.length]);
    feeds[names.attention_mask] = new ort.Tensor('int64', new BigInt64Array(pastLen + ids.length).fill(1n),
      [1, pastLen + ids.length]);
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) feeds[pastName(k, l)] = past[k][l];
    const r = await session.run(feeds);
    const next = { key: [], value: [] };
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) next[k].push(r[presName(k, l)]);
    return { logits: r[outs.logits], past: next };
  }

  function emptyPast(len, fill) {
    const p = { key: [], value: [] };
    let x = 12345;
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) {
        const a = new Float32Array(Nkv * len * H);
        if (fill) for (let i = 0; i < a.length; i++) { x = (x * 1103515245 + 12345) % 2147483648; a[i] = x / 2147483648 - 0.5; }
        p[k].push(new ort.Tensor('float32', a, [1, Nkv, len, H]));
      }
    return p;
  }

  const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
  for (const P of o.prompts) {
    const ttft = [], prefill = [], times = [];
    const ids = promptIds(P, V);
    for (let r = 0; r < o.repeat; r++) {
      let a = now();
      let res = await step(ids, emptyPast(0, false), 0);
      prefill.push(now() - a);
      let next = argmax(res.logits.data, (P - 1) * V, V);
      ttft.push(now() - a);
      let len = P;
      for (let g = 1; g < o.gen; g++) {
        a = now();
        res = await step(new BigInt64Array([BigInt(next)]), res.past, len);
        next = argmax(res.logits.data, 0, V);
        times.push(now() - a);
        len++;
      }
    }
    const med = median(times);
    emit({
      case: 'prompt', runtime: 'onnxruntime', prompt_len: P, gen: o.gen, threads: o.threads, load_ms: loadMs,
      rss_bytes: process.memoryUsage().rss, ttft_ms: median(ttft), prefill_tokens_per_s: P * 1000 / median(prefill),
      decode_ms_median: med, decode_ms_p90: p90(times), decode_tokens_per_s: med > 0 ? 1000 / med : 0,
      kv_bytes_copied_per_token: null, repeat: o.repeat,
    });
  }
  for (const C of o.contexts) {
    let past = emptyPast(C, true), len = C, next = 1;
    const times = [];
    for (let s = 0; s < o.contextSteps; s++) {
      const a = now();
      const res = await step(new BigInt64Array([BigInt(next)]), past, len);
      next = argmax(res.logits.data, 0, V);
      times.push(now() - a);
      past = res.past;
      len++;
    }
    const med = median(times);
    emit({
      case: 'context', runtime: 'onnxruntime', context: C, steps: o.contextSteps, threads: o.threads,
      decode_ms_median: med, decode_ms_p90: p90(times), decode_tokens_per_s: med > 0 ? 1000 / med : 0,
      rss_bytes: process.memoryUsage().rss,
    });
  }
}

main().catch((e) => fail(e.message || e));
