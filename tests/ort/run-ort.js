#!/usr/bin/env node
// ONNX Runtime cross-check harness: runs a model folder through onnxruntime-node
// the way qwen3d's `generate` runs it (prefill, then one call per decode step,
// teacher-forced when ids are given) and writes the logits in the same
// --dump-logits format, so the two runtimes can be compared row by row.
//
// Usage: run-ort.js --model DIR --prompt-ids 1,2,3 [--teacher-ids 4,5,6]
//                   [--steps N] [--dump-logits FILE] [--threads N]
//                   [--accuracy-level N] [--work-dir DIR] [--round-past f16|q8] [--json]
//                   [--opt-level disabled|basic|extended|all] [--config KEY=VALUE]
//
// --opt-level sets ONNX Runtime's graph optimization level (default all). At
// extended and all it rewrites DequantizeLinear -> MatMul of UINT4 weights
// into MatMulNBits with int8 activations (accuracy level from the session
// config key session.qdq_matmulnbits_accuracy_level, default 4), so the
// exact reference for the standard INT4 contract runs at basic. --config adds
// a session config entry (repeatable).
//
// --accuracy-level N runs a copy whose MatMulNBits nodes all carry
// accuracy_level=N (0 = fp32 activations, 4 = int8), made in a scratch folder
// under --work-dir (default: the system temp folder) and removed afterwards.
// --round-past f16|q8 rounds each past key and value to what a qwen3d
// session cache of that type holds before it is fed back.
// --json prints {prompt_ids, ids (greedy argmax per row), vocab, threads,
// load_ms, prefill_ms, decode_ms [per step]}.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

const PROG = 'run-ort';

class UsageError extends Error {}

function fail(msg) {
  // One line, whatever ORT put in its message.
  process.stderr.write(`${PROG}: ${String(msg).replace(/\s*\n\s*/g, ' ').trim()}\n`);
  process.exit(1);
}

function parseIdList(flag, s) {
  if (s === '') return [];
  return s.split(',').map((t) => {
    if (!/^\s*\d+\s*$/.test(t)) throw new UsageError(`${flag}: "${t}" is not a token id`);
    return Number(t);
  });
}

function parseCount(flag, s, min) {
  if (!/^\d+$/.test(s) || Number(s) < min) throw new UsageError(`${flag}: "${s}" is not an integer >= ${min}`);
  return Number(s);
}

// IEEE binary16 round-to-nearest-even of float32 values, in place (as F16C's
// VCVTPS2PH: overflow to inf, NaN stays NaN, subnormals exact).
const f32b = new Float32Array(1);
const u32b = new Uint32Array(f32b.buffer);
function halfBits(v) {
  f32b[0] = v;
  const x = u32b[0], sign = (x >>> 16) & 0x8000, exp = (x >>> 23) & 0xff;
  let m = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (m ? 0x200 | (m >>> 13) : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    m |= 0x800000;
    const shift = 14 - e, rem = m & ((1 << shift) - 1), half = 1 << (shift - 1);
    let h = m >>> shift;
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (m >>> 13);
  const rem = m & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return sign | h;
}
function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  if (e === 0) return sign * m * 2 ** -24;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}
function roundF16InPlace(a) {
  for (let i = 0; i < a.length; i++) a[i] = halfToFloat(halfBits(a[i]));
}

// Nearest integer, ties to even (what lrintf does in the default rounding mode).
function rintEven(v) {
  const f = Math.floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

// What a q8 KV cache holds (kernels/krn.h, krn_kv_type): each row of H
// values as int8 codes times one fp32 scale a / 127, read back as code *
// scale; a row with inf or NaN reads NaN, a row of zeros (or whose scale
// underflows) reads zeros. fp32 steps through Math.fround: a float quotient
// computed in double and rounded once is the correctly rounded one.
// Rows [from, T) of each kv head of a [1, Nkv, T, H] tensor; earlier rows
// already hold what the cache holds.
function roundQ8Rows(a, dims, from) {
  const [, nkv, T, H] = dims;
  for (let g = 0; g < nkv; g++) {
    for (let t = from; t < T; t++) {
      const o = (g * T + t) * H;
      let amax = 0, finite = true;
      for (let d = 0; d < H; d++) {
        const m = Math.abs(a[o + d]);
        if (!(m <= 3.4028234663852886e38)) finite = false;
        if (m > amax) amax = m;
      }
      const s = finite ? Math.fround(amax / 127) : NaN;
      for (let d = 0; d < H; d++) {
        let c = finite && s > 0 ? rintEven(Math.fround(a[o + d] / s)) : 0;
        c = Math.max(-127, Math.min(127, c));
        a[o + d] = Math.fround(c * s);
      }
    }
  }
}

function parseArgs(argv) {
  const o = { threads: 1, teacher: [], steps: null, json: false, accuracyLevel: null, optLevel: 'all', config: {} };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new UsageError(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--model': o.model = val(); break;
      case '--prompt-ids': o.prompt = parseIdList(a, val()); break;
      case '--teacher-ids': o.teacher = parseIdList(a, val()); break;
      case '--steps': o.steps = parseCount(a, val(), 0); break;
      case '--dump-logits': o.dump = val(); break;
      case '--threads': o.threads = parseCount(a, val(), 1); break;
      case '--accuracy-level': o.accuracyLevel = parseCount(a, val(), 0); break;
      case '--work-dir': o.workDir = val(); break;
      case '--json': o.json = true; break;
      case '--round-past':
        o.roundPast = val();
        if (o.roundPast !== 'f16' && o.roundPast !== 'q8') throw new UsageError('--round-past wants f16 or q8');
        break;
      case '--opt-level': {
        o.optLevel = val();
        if (!['disabled', 'basic', 'extended', 'all'].includes(o.optLevel)) throw new UsageError(`--opt-level: "${o.optLevel}"`);
        break;
      }
      case '--config': {
        const kv = val(), eq = kv.indexOf('=');
        if (eq <= 0) throw new UsageError(`--config: "${kv}" is not KEY=VALUE`);
        o.config[kv.slice(0, eq)] = kv.slice(eq + 1);
        break;
      }
      default: throw new UsageError(`unknown argument "${a}"`);
    }
  }
  if (!o.model) throw new UsageError('--model DIR is required');
  if (!o.prompt || o.prompt.length === 0) throw new UsageError('--prompt-ids needs at least one id');
  if (o.steps === null) o.steps = o.teacher.length;
  return o;
}

// The decoder section of genai_config.json fixes the file name and the I/O names;
// the %d patterns are expanded per layer.
function readGenaiConfig(dir) {
  const file = path.join(dir, 'genai_config.json');
  let cfg;
  try {
    cfg = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: ${e.message}`);
  }
  const m = cfg.model || {};
  const d = m.decoder || {};
  const inp = d.inputs || {};
  const out = d.outputs || {};
  const need = (v, what) => {
    if (v === undefined || v === null) throw new Error(`${file}: missing ${what}`);
    return v;
  };
  return {
    file,
    filename: d.filename || 'model.onnx',
    vocab: m.vocab_size,
    layers: d.num_hidden_layers,
    kvHeads: d.num_key_value_heads,
    headSize: d.head_size,
    inputIds: need(inp.input_ids, 'model.decoder.inputs.input_ids'),
    attentionMask: need(inp.attention_mask, 'model.decoder.inputs.attention_mask'),
    pastKey: need(inp.past_key_names, 'model.decoder.inputs.past_key_names'),
    pastValue: need(inp.past_value_names, 'model.decoder.inputs.past_value_names'),
    logits: need(out.logits, 'model.decoder.outputs.logits'),
    presentKey: need(out.present_key_names, 'model.decoder.outputs.present_key_names'),
    presentValue: need(out.present_value_names, 'model.decoder.outputs.present_value_names'),
  };
}

const fmt = (pattern, i) => pattern.replace('%d', String(i));

// Everything the loop needs, taken from the session itself; genai_config only
// fills dimensions the graph leaves symbolic.
function describe(session, cfg) {
  const meta = new Map(session.inputMetadata.map((m) => [m.name, m]));
  const outs = new Set(session.outputNames);
  for (const n of [cfg.inputIds, cfg.attentionMask]) {
    if (!meta.has(n)) throw new Error(`model has no input "${n}" (named in ${cfg.file})`);
  }
  if (!outs.has(cfg.logits)) throw new Error(`model has no output "${cfg.logits}" (named in ${cfg.file})`);
  const layers = [];
  for (let i = 0; meta.has(fmt(cfg.pastKey, i)); i++) {
    const l = {
      pastKey: fmt(cfg.pastKey, i), pastValue: fmt(cfg.pastValue, i),
      presentKey: fmt(cfg.presentKey, i), presentValue: fmt(cfg.presentValue, i),
    };
    if (!meta.has(l.pastValue)) throw new Error(`model has no input "${l.pastValue}"`);
    for (const n of [l.presentKey, l.presentValue]) if (!outs.has(n)) throw new Error(`model has no output "${n}"`);
    layers.push(l);
  }
  if (layers.length === 0) throw new Error(`model has no input "${fmt(cfg.pastKey, 0)}" (named in ${cfg.file})`);
  if (cfg.layers !== undefined && cfg.layers !== layers.length) {
    throw new Error(`${cfg.file}: num_hidden_layers is ${cfg.layers} but the graph has ${layers.length} past inputs`);
  }
  const pk = meta.get(layers[0].pastKey);
  if (pk.isTensor && pk.type !== 'float32') throw new Error(`${pk.name} is ${pk.type}; only float32 KV is supported`);
  const shape = (pk.isTensor && pk.shape) || [];
  const dim = (k, fallback, what) => {
    const v = typeof shape[k] === 'number' ? shape[k] : fallback;
    if (!Number.isInteger(v) || v <= 0) throw new Error(`cannot tell ${what} from ${pk.name} or ${cfg.file}`);
    return v;
  };
  const kvHeads = dim(1, cfg.kvHeads, 'the number of KV heads');
  const headSize = dim(3, cfg.headSize, 'the head size');
  for (const [n, v] of [['num_key_value_heads', cfg.kvHeads], ['head_size', cfg.headSize]]) {
    const g = n === 'head_size' ? headSize : kvHeads;
    if (v !== undefined && v !== g) throw new Error(`${cfg.file}: ${n} is ${v} but ${pk.name} says ${g}`);
  }
  return { layers, kvHeads, headSize };
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    fail(e.message);
  }
  if (os.endianness() !== 'LE') fail('the dump format is little-endian; this host is not');
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    fail(`cannot load onnxruntime-node (is NODE_PATH set?): ${e.message}`);
  }
  const cfg = readGenaiConfig(o.model);
  if (cfg.vocab !== undefined) {
    for (const [flag, list] of [['--prompt-ids', o.prompt], ['--teacher-ids', o.teacher]]) {
      const bad = list.find((x) => x >= cfg.vocab);
      if (bad !== undefined) fail(`${flag}: id ${bad} is outside the vocabulary (${cfg.vocab} in ${cfg.file})`);
    }
  }
  let modelDir = o.model;
  let tmpDir = null;
  if (o.accuracyLevel !== null) {
    // accuracy_level is an attribute of every MatMulNBits node, not a session
    // option, so the override runs on a copy of the graph (weights linked)
    // in a scratch folder under --work-dir.
    tmpDir = fs.mkdtempSync(path.join(o.workDir || os.tmpdir(), 'run-ort-'));
    modelDir = tmpDir;
  }
  try {
    if (tmpDir) {
      const { rewriteModel } = require('./rewrite-model.js');
      rewriteModel({ input: o.model, output: tmpDir, keepLayout: true, accuracyLevel: o.accuracyLevel, quiet: true });
    }
    await run(ort, o, cfg, modelDir);
  } finally {
    if (tmpDir) fs.rmSync(tmpDir, { recursive: true, force: true });
  }
}

// Session config entries as onnxruntime-node takes them: "a.b=c" as {a: {b: "c"}}.
function configTree(flat) {
  const tree = {};
  for (const [k, v] of Object.entries(flat)) {
    const parts = k.split('.');
    let node = tree;
    for (const p of parts.slice(0, -1)) node = node[p] = node[p] || {};
    node[parts[parts.length - 1]] = v;
  }
  return tree;
}

async function run(ort, o, cfg, modelDir) {
  const modelPath = path.join(modelDir, cfg.filename);
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: o.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: o.optLevel,
    extra: configTree(o.config),
    // Fatal only: ORT's own error lines would break the one-line error rule.
    logSeverityLevel: 4,
  });
  const loadMs = performance.now() - t0;
  const g = describe(session, cfg);

  const dumpFd = o.dump ? fs.openSync(o.dump, 'w') : null;
  const ids = [];
  const decodeMs = [];
  let vocab = null;
  // Each produced row goes to the dump and to the greedy id list; the row is a
  // view into ORT's output buffer, so nothing is copied twice.
  const emit = (logits, row) => {
    const [b, s, v] = logits.dims;
    if (b !== 1 || row >= s) throw new Error(`unexpected logits shape [${logits.dims}]`);
    if (cfg.vocab !== undefined && v !== cfg.vocab) throw new Error(`logits have ${v} columns but ${cfg.file} says vocab_size ${cfg.vocab}`);
    vocab = v;
    const data = logits.data.subarray(row * v, (row + 1) * v);
    ids.push(argmax(data));
    if (dumpFd !== null) fs.writeSync(dumpFd, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  };

  const i64 = (arr) => BigInt64Array.from(arr, (x) => BigInt(x));
  const feeds = {};
  const S = o.prompt.length;
  feeds[cfg.inputIds] = new ort.Tensor('int64', i64(o.prompt), [1, S]);
  feeds[cfg.attentionMask] = new ort.Tensor('int64', new BigInt64Array(S).fill(1n), [1, S]);
  const emptyPast = new ort.Tensor('float32', new Float32Array(0), [1, g.kvHeads, 0, g.headSize]);
  for (const l of g.layers) {
    feeds[l.pastKey] = emptyPast;
    feeds[l.pastValue] = emptyPast;
  }
  let t = performance.now();
  let out = await session.run(feeds);
  const prefillMs = performance.now() - t;
  emit(out[cfg.logits], S - 1);

  let total = S;
  for (let step = 0; step < o.steps; step++) {
    const next = step < o.teacher.length ? o.teacher[step] : ids[ids.length - 1];
    total += 1;
    const f = {};
    f[cfg.inputIds] = new ort.Tensor('int64', i64([next]), [1, 1]);
    f[cfg.attentionMask] = new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]);
    // The tensor contract: present.N of one call is past.N of the next.
    for (const l of g.layers) {
      if (o.roundPast === 'f16') {
        // What an fp16 KV cache holds: every past key and value rounded to
        // binary16 (nearest even), fed back as float32.
        roundF16InPlace(out[l.presentKey].data);
        roundF16InPlace(out[l.presentValue].data);
      } else if (o.roundPast === 'q8') {
        // What a q8 cache holds: the rows new since the last call quantized.
        // (The last call added the prompt's rows, or the one row at total - 2.)
        const from = step ? total - 2 : 0;
        roundQ8Rows(out[l.presentKey].data, out[l.presentKey].dims, from);
        roundQ8Rows(out[l.presentValue].data, out[l.presentValue].dims, from);
      }
      f[l.pastKey] = out[l.presentKey];
      f[l.pastValue] = out[l.presentValue];
    }
    t = performance.now();
    out = await session.run(f);
    decodeMs.push(performance.now() - t);
    emit(out[cfg.logits], 0);
  }
  if (dumpFd !== null) fs.closeSync(dumpFd);
  if (session.release) await session.release();

  const r3 = (x) => Math.round(x * 1000) / 1000;
  if (o.json) {
    process.stdout.write(JSON.stringify({
      prompt_ids: o.prompt,
      ids,
      vocab,
      threads: o.threads,
      load_ms: r3(loadMs),
      prefill_ms: r3(prefillMs),
      decode_ms: decodeMs.map(r3),
    }) + '\n');
  } else {
    const med = decodeMs.length ? [...decodeMs].sort((a, b) => a - b)[decodeMs.length >> 1] : 0;
    process.stdout.write(`ids: ${ids.join(',')}\n` +
      `load ${loadMs.toFixed(1)} ms, prefill ${prefillMs.toFixed(1)} ms (${S} tokens), ` +
      `decode median ${med.toFixed(2)} ms over ${decodeMs.length} steps, ${o.threads} thread(s)\n`);
  }
}

main().catch((e) => fail(e && e.message ? e.message : e));
