#!/usr/bin/env node
// ONNX Runtime's side of the benchmarks: the same cases as `qwen3d bench`, on
// the same model folder, through onnxruntime-node.
//
// Usage: ort-bench.js --model DIR [--prompt-len 32,512] [--gen 128] [--threads N]
//                     [--repeat R] [--contexts 128,1024,4096] [--context-steps N]
//                     [--kv contract|share] [--logits all|last]
// Prints one JSON object per case with the field names `qwen3d bench --json`
// uses, plus the configuration (ort_kv, ort_logits).
//
// --kv contract (default): the graph's tensor contract, present fed back as
//   past. Inside GroupQueryAttention ONNX Runtime copies the whole past into
//   the new present at every step, and onnxruntime-node copies every output
//   it returns, present included, into a new JavaScript buffer.
// --kv share: one preallocated buffer per layer for keys and one for values,
//   sized for the whole case, passed as the past input and as the
//   preallocated present output. GroupQueryAttention sees the same pointer
//   and appends the new rows in place (past_present_share_buffer, as ONNX
//   Runtime GenAI runs it), so its copy of the past is gone. onnxruntime-node
//   1.30 still copies each fetched output, these buffers included, into a new
//   JavaScript ArrayBuffer after every run: it has no IO binding for CPU
//   tensors, and it binds a preallocated buffer only to an output that is
//   fetched. That copy cannot be avoided from JavaScript.
// --logits all (default): the graph as exported, whose LM head computes the
//   logits of every position, the prompt's included. --logits last runs a
//   copy of the graph (a hidden file in the model folder for as long as the
//   run lasts, sharing its weights file) with a Slice of the last position in
//   front of the LM head, so prefill computes one row of logits, as qwen3d
//   does.
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
  const o = { prompts: [32, 512], gen: 128, threads: 1, repeat: 3, contexts: [128, 1024, 4096], contextSteps: 32,
    kv: 'contract', logits: 'all' };
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
      case '--kv': o.kv = v(); break;
      case '--logits': o.logits = v(); break;
      default: fail(`unknown argument "${argv[i]}"`);
    }
  }
  if (!o.model) fail('--model DIR is required');
  if (!['contract', 'share'].includes(o.kv)) fail(`--kv wants contract or share, not "${o.kv}"`);
  if (!['all', 'last'].includes(o.logits)) fail(`--logits wants all or last, not "${o.logits}"`);
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

// A copy of the graph whose LM head (the node writing the logits output)
// reads only the last position: Slice(x, [-1], [2^31-1], axis 1) in front of
// it. ONNX Runtime reads external data only from the model file's own folder
// (symbolic links resolved), so the copy is written into the model folder,
// as a hidden file removed at exit, and shares the weights file.
function lastPositionModel(dir, file, logitsName) {
  const onnx = require('onnx-proto').onnx;
  const model = onnx.ModelProto.decode(fs.readFileSync(path.join(dir, file)));
  const g = model.graph;
  const at = g.node.findIndex((n) => n.output.includes(logitsName));
  if (at < 0) fail(`${file}: no node writes the logits output "${logitsName}"`);
  const head = g.node[at], x = head.input[0], y = `${x}/last_position`;
  const ints = (name, v) => onnx.TensorProto.create({ name, dims: [1], dataType: onnx.TensorProto.DataType.INT64, int64Data: [v] });
  g.initializer.push(ints(`${y}/starts`, -1), ints(`${y}/ends`, 2147483647), ints(`${y}/axes`, 1));
  g.node.splice(at, 0, onnx.NodeProto.create({ name: `${head.name}/last_position`, opType: 'Slice',
    input: [x, `${y}/starts`, `${y}/ends`, `${y}/axes`], output: [y] }));
  head.input[0] = y;
  for (const out of g.output)
    if (out.name === logitsName && out.type && out.type.tensorType && out.type.tensorType.shape)
      out.type.tensorType.shape.dim[1] = onnx.TensorShapeProto.Dimension.create({ dimValue: 1 });
  const copy = path.join(dir, `.ort-bench-last-position-${process.pid}.onnx`);
  try {
    fs.writeFileSync(copy, onnx.ModelProto.encode(model).finish());
  } catch (e) {
    fail(`--logits last writes a copy of the graph into the model folder: ${e.message}`);
  }
  process.on('exit', () => fs.rmSync(copy, { force: true }));
  return copy;
}

async function main() {
  const o = args(process.argv.slice(2));
  const cfg = JSON.parse(fs.readFileSync(path.join(o.model, 'genai_config.json'), 'utf8'));
  const dec = cfg.model.decoder;
  const L = dec.num_hidden_layers, Nkv = dec.num_key_value_heads, H = dec.head_size, V = cfg.model.vocab_size;
  const names = dec.inputs, outs = dec.outputs;
  const file = dec.filename || 'model.onnx';
  const modelPath = o.logits === 'last' ? lastPositionModel(o.model, file, outs.logits) : path.join(o.model, file);
  const t0 = now();
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: o.threads, interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3,
  });
  const loadMs = now() - t0;

  const pastName = (kind, l) => (kind === 'key' ? names.past_key_names : names.past_value_names).replace('%d', l);
  const presName = (kind, l) => (kind === 'key' ? outs.present_key_names : outs.present_value_names).replace('%d', l);

  // The KV state of one sequence: LEN positions held, room for CAP (--kv
  // share only), random values when FILL. step() runs the graph on ids,
  // leaves the state holding them too and returns the logits.
  function kvState(len, cap, fill) {
    const st = { len, key: [], value: [] };
    const size = o.kv === 'share' ? cap : len;
    let x = 12345;
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) {
        const a = new Float32Array(Nkv * size * H);
        if (fill)
          for (let h = 0; h < Nkv; h++)
            for (let i = h * size * H; i < (h * size + len) * H; i++) { x = (x * 1103515245 + 12345) % 2147483648; a[i] = x / 2147483648 - 0.5; }
        st[k].push(new ort.Tensor('float32', a, [1, Nkv, size, H]));
      }
    return st;
  }

  async function step(ids, st) {
    const feeds = {}, fetches = {};
    feeds[names.input_ids] = new ort.Tensor('int64', ids, [1, ids.length]);
    feeds[names.attention_mask] = new ort.Tensor('int64', new BigInt64Array(st.len + ids.length).fill(1n),
      [1, st.len + ids.length]);
    fetches[outs.logits] = null;
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) {
        feeds[pastName(k, l)] = st[k][l];
        fetches[presName(k, l)] = o.kv === 'share' ? st[k][l] : null;
      }
    const r = await session.run(feeds, fetches);
    if (o.kv === 'contract')
      for (let l = 0; l < L; l++)
        for (const k of ['key', 'value']) st[k][l] = r[presName(k, l)];
    st.len += ids.length;
    return r[outs.logits];
  }
  const lastArgmax = (logits) => argmax(logits.data, (logits.dims[1] - 1) * V, V);

  const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
  for (const P of o.prompts) {
    const ttft = [], prefill = [], times = [];
    const ids = promptIds(P, V);
    for (let r = 0; r < o.repeat; r++) {
      const st = kvState(0, P + o.gen, false);
      let a = now();
      const logits = await step(ids, st);
      prefill.push(now() - a);
      let next = lastArgmax(logits);
      ttft.push(now() - a);
      for (let g = 1; g < o.gen; g++) {
        a = now();
        next = lastArgmax(await step(new BigInt64Array([BigInt(next)]), st));
        times.push(now() - a);
      }
    }
    const med = median(times);
    emit({
      case: 'prompt', runtime: 'onnxruntime', prompt_len: P, gen: o.gen, threads: o.threads, load_ms: loadMs,
      rss_bytes: process.memoryUsage().rss, ttft_ms: median(ttft), prefill_tokens_per_s: P * 1000 / median(prefill),
      decode_ms_median: med, decode_ms_p90: p90(times), decode_tokens_per_s: med > 0 ? 1000 / med : 0,
      kv_bytes_copied_per_token: null, repeat: o.repeat, ort_kv: o.kv, ort_logits: o.logits,
    });
  }
  for (const C of o.contexts) {
    const st = kvState(C, C + o.contextSteps, true);
    let next = 1;
    const times = [];
    for (let s = 0; s < o.contextSteps; s++) {
      const a = now();
      next = lastArgmax(await step(new BigInt64Array([BigInt(next)]), st));
      times.push(now() - a);
    }
    const med = median(times);
    emit({
      case: 'context', runtime: 'onnxruntime', context: C, steps: o.contextSteps, threads: o.threads,
      decode_ms_median: med, decode_ms_p90: p90(times), decode_tokens_per_s: med > 0 ? 1000 / med : 0,
      rss_bytes: process.memoryUsage().rss, ort_kv: o.kv, ort_logits: o.logits,
    });
  }
}

main().catch((e) => fail(e.message || e));
