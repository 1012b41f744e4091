#!/usr/bin/env node
// Writes a model folder again with every 4-bit MatMulNBits weight quantized
// anew from its dequantized values, in blocks of --block-size (16 to 256, a
// power of 2; default 32) along K:
//   --zero-points on (default): asymmetric, as an export made with
//     int4_is_symmetric=false: per column and block scale = (max - min) / 15
//     and a 4-bit zero point round(-min / scale); the node gets its
//     zero_points input (UINT8, two per byte, even block in the low nibble).
//   --zero-points off: symmetric, scale = max|w| / 7 around the implied zero
//     point 8, and no zero_points input.
//   --eight-bit head|mixed|all (default none): these nodes get 8-bit codes
//     instead (bits = 8: one byte per weight, scale (max - min) / 255 and a
//     zero point byte per block, or max|w| / 127 around the implied 128), as
//     the ONNX Runtime GenAI builder's int4_algo_config k_quant_last (the LM
//     head, the node writing a graph output) and k_quant_mixed (the LM head,
//     and the qkv_proj, v_proj and down_proj MatMuls of the layers i with
//     i < L/8, i >= 7L/8 or (i - round(L/8)) % 3 == 2, named as the builder
//     names them) write them.
//   --tie-embedding: the float embedding Gather gives way to the LM head's
//     codes, as the builder writes tied models (tie_word_embeddings, e.g.
//     Qwen3 0.6B to 4B) quantized with rtn, k_quant or k_quant_mixed: a
//     Constant [N, K * bits / 8] and a Reshape of the head's B to it, then
//     GatherBlockQuantized(that, input_ids, scales, zero points) with bits,
//     block_size, gather_axis 0 and quantize_axis 1; the head's scales and
//     zero points become 2-D [N, blocks], as the builder's quantizer writes
//     them. The float table leaves the model.
// Everything else is kept; all tensors go to one new data file. ONNX Runtime
// and qwen3d then run the same graph.
//
// Usage: requantize-model.js --in DIR --out DIR [--block-size N] [--zero-points on|off]
//                            [--eight-bit none|head|mixed|all] [--tie-embedding]
'use strict';

const fs = require('fs');
const path = require('path');
const { loadOnnx, dataTensors, resolveExternal, LOC_EXTERNAL } = require('./rewrite-model.js');

const PROG = 'requantize-model';
const DT_FLOAT = 1, DT_UINT8 = 2, DT_INT64 = 7;

function readExt(src) {
  const buf = Buffer.alloc(src.length);
  let got = 0;
  while (got < src.length) {
    const r = fs.readSync(src.fd, buf, got, src.length - got, src.offset + got);
    if (r === 0) throw new Error('unexpected end of data file');
    got += r;
  }
  return buf;
}

const attr = (n, name, dflt) => {
  const a = (n.attribute || []).find((x) => x.name === name);
  return a ? Number(String(a.i)) : dflt;
};

// The source's dequantized weights (codes in blocks of srcBs, zero point 8
// or the node's own), quantized again in blocks of bs at 4 or 8 bits, with
// or without zero points.
function requantize(b, sc, zpIn, N, K, srcBs, bs, withZp, bits) {
  const skb = Math.ceil(K / srcBs), sblob = srcBs / 2, szb = Math.ceil(skb / 2);
  const kb = Math.ceil(K / bs), blob = bs * bits / 8, zb = bits === 8 ? kb : Math.ceil(kb / 2);
  const qmax = (1 << bits) - 1, half = 1 << (bits - 1);
  const outB = Buffer.alloc(N * kb * blob);
  const outS = Buffer.alloc(N * kb * 4);
  const outZ = withZp ? Buffer.alloc(N * zb) : null;
  const w = new Float32Array(K);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const j = Math.floor(k / srcBs), t = k % srcBs;
      const s = sc.readFloatLE((n * skb + j) * 4);
      const z0 = zpIn ? (zpIn[n * szb + (j >> 1)] >> (4 * (j & 1))) & 15 : 8;
      const byte = b[(n * skb + j) * sblob + (t >> 1)];
      const q = (t & 1) ? byte >> 4 : byte & 15;
      w[k] = Math.fround((q - z0) * s);
    }
    for (let j = 0; j < kb; j++) {
      const k0 = j * bs, len = Math.min(bs, K - k0);
      let lo = 0, hi = 0, amax = 0;
      for (let t = 0; t < len; t++) {
        lo = Math.min(lo, w[k0 + t]);
        hi = Math.max(hi, w[k0 + t]);
        amax = Math.max(amax, Math.abs(w[k0 + t]));
      }
      let scale, zp;
      if (withZp) {
        scale = hi > lo ? Math.fround((hi - lo) / qmax) : 1;
        zp = Math.min(qmax, Math.max(0, Math.round(-lo / scale)));
        if (bits === 8) outZ[n * zb + j] = zp;
        else outZ[n * zb + (j >> 1)] |= zp << (4 * (j & 1));
      } else {
        scale = amax > 0 ? Math.fround(amax / (half - 1)) : 1;
        zp = half;
      }
      outS.writeFloatLE(scale, (n * kb + j) * 4);
      for (let t = 0; t < len; t++) {
        const q = Math.min(qmax, Math.max(0, Math.round(w[k0 + t] / scale) + zp));
        if (bits === 8) outB[(n * kb + j) * blob + t] = q;
        else outB[(n * kb + j) * blob + (t >> 1)] |= (t & 1) ? q << 4 : q;
      }
    }
  }
  return { outB, outS, outZ, kb };
}

// The embedding as the builder writes it for tied models: rows of the LM head's codes (--tie-embedding).
function tieEmbedding(graph, head, inits, bs) {
  if (!head) throw new Error('--tie-embedding: no MatMulNBits writes a graph output (the LM head)');
  if (head.K % bs) throw new Error(`--tie-embedding: K = ${head.K} is not a multiple of the block size ${bs}`);
  const inputs = new Set((graph.input || []).map((i) => i.name));
  const at = graph.node.findIndex((n) => n.opType === 'Gather' && !n.domain && inits.has(n.input[0]) &&
    inits.get(n.input[0]).dataType === DT_FLOAT && inputs.has(n.input[1]));
  if (at < 0) throw new Error('--tie-embedding: no Gather of a float table by a graph input');
  const g = graph.node[at];
  const zName = head.n.input.length > 3 && head.n.input[3] ? head.n.input[3] : null;
  inits.get(head.sName).dims = [head.N, head.kb];
  if (zName) inits.get(zName).dims = [head.N, head.bits === 8 ? head.kb : Math.ceil(head.kb / 2)];
  const shape = Buffer.alloc(16);
  shape.writeBigInt64LE(BigInt(head.N), 0);
  shape.writeBigInt64LE(BigInt(head.K * head.bits / 8), 8);
  const shapeName = `/model/constants/INT64/[${head.N}, ${head.K * head.bits / 8}]`;
  const table = '/model/embed_tokens/Reshape/output_0';
  const constant = {
    name: '/model/constant_nodes/embedding_shape', opType: 'Constant', domain: '', input: [], output: [shapeName],
    attribute: [{ name: 'value', type: 4, t: { dataType: DT_INT64, dims: [2], rawData: shape } }], // TENSOR
  };
  const reshape = {
    name: '/model/embed_tokens/Reshape', opType: 'Reshape', domain: '', input: [head.bName, shapeName],
    output: [table], attribute: [],
  };
  const ints = (name, i) => ({ name, type: 2, i }); // AttributeProto.INT
  const gbq = {
    name: '/model/embed_tokens/GatherBlockQuantized', opType: 'GatherBlockQuantized', domain: 'com.microsoft',
    input: [table, g.input[1], head.sName, ...(zName ? [zName] : [])], output: g.output,
    attribute: [ints('bits', head.bits), ints('block_size', bs), ints('gather_axis', 0), ints('quantize_axis', 1)],
  };
  graph.node.splice(at, 1, constant, reshape, gbq);
}

function run(opts) {
  const input = path.resolve(opts.input), output = path.resolve(opts.output);
  if (input === output) throw new Error('--out must differ from --in');
  let modelFile = 'model.onnx';
  const cfgPath = path.join(input, 'genai_config.json');
  if (fs.existsSync(cfgPath)) {
    const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
    modelFile = (cfg.model && cfg.model.decoder && cfg.model.decoder.filename) || modelFile;
  }
  const { onnx } = loadOnnx();
  const model = onnx.ModelProto.decode(fs.readFileSync(path.join(input, modelFile)));
  const graph = model.graph;
  const files = new Map();
  const data = new Map(); // tensor -> its bytes, for the external ones
  const tensors = dataTensors(graph).map((x) => x.t);
  for (const { t, where } of dataTensors(graph)) {
    if (t.dataLocation === LOC_EXTERNAL) data.set(t, readExt(resolveExternal(input, t, where, files)));
  }
  for (const f of files.values()) fs.closeSync(f.fd);
  const inits = new Map(graph.initializer.map((t) => [t.name, t]));
  const bytesOf = (name) => {
    const t = inits.get(name);
    if (!t) return null;
    return data.get(t) || (t.rawData && t.rawData.length ? Buffer.from(t.rawData) : null);
  };
  const setBytes = (name, buf) => {
    const t = inits.get(name);
    t.dataLocation = LOC_EXTERNAL;
    data.set(t, buf);
  };

  const setAttr = (n, name, v) => {
    const a = (n.attribute || []).find((x) => x.name === name);
    if (a) a.i = v;
    else n.attribute.push({ name, type: 2, i: v }); // AttributeProto.INT
  };
  // The nodes that get 8-bit codes (--eight-bit).
  const outputs = new Set((graph.output || []).map((o) => o.name));
  const layerOf = (n) => { const m = /layers\.(\d+)\//.exec(n.name || ''); return m ? Number(m[1]) : -1; };
  // Layers with attention: the builder names the final norm after the last layer too.
  const nLayers = 1 + Math.max(-1, ...graph.node.filter((n) => /\/attn\//.test(n.name || '')).map(layerOf));
  const roundEven = (x) => { // Python's round(), which the builder calls: halves go to the even neighbour
    const f = Math.floor(x), d = x - f;
    return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  };
  const sensitive = (i) => i < nLayers / 8 || i >= 7 * nLayers / 8 || (i - roundEven(nLayers / 8)) % 3 === 2;
  const eightBit = (n) => {
    if (opts.eightBit === 'all') return true;
    if (opts.eightBit === 'none') return false;
    if (n.output.some((o) => outputs.has(o))) return true;
    return opts.eightBit === 'mixed' && layerOf(n) >= 0 && sensitive(layerOf(n)) &&
      /\/(qkv_proj|v_proj|down_proj)\//.test(n.name || '');
  };
  let count = 0, count8 = 0, head = null;
  for (const n of graph.node) {
    if (n.opType !== 'MatMulNBits' || n.domain !== 'com.microsoft') continue;
    const srcBs = attr(n, 'block_size', 0);
    if (attr(n, 'bits', 4) !== 4 || srcBs < 16 || srcBs & (srcBs - 1)) {
      throw new Error(`node "${n.name}": only 4-bit weights in blocks of a power of 2 are requantized`);
    }
    if (n.input.length > 4 && n.input.slice(4).some((x) => x)) {
      throw new Error(`node "${n.name}": g_idx or bias inputs are not requantized`);
    }
    const N = attr(n, 'N', 0), K = attr(n, 'K', 0);
    const [bName, sName] = [n.input[1], n.input[2]];
    const zName = n.input.length > 3 && n.input[3] ? n.input[3] : null;
    if (!bytesOf(bName) || !bytesOf(sName) || inits.get(sName).dataType !== DT_FLOAT) {
      throw new Error(`node "${n.name}": B and FLOAT scales must be initializers with data`);
    }
    if (zName && (!bytesOf(zName) || inits.get(zName).dataType !== DT_UINT8)) {
      throw new Error(`node "${n.name}": the zero points must be a UINT8 initializer with data`);
    }
    const bits = eightBit(n) ? 8 : 4;
    const q = requantize(bytesOf(bName), bytesOf(sName), zName ? bytesOf(zName) : null, N, K, srcBs,
      opts.blockSize, opts.zeroPoints, bits);
    setBytes(bName, q.outB);
    inits.get(bName).dims = [N, q.kb, opts.blockSize * bits / 8];
    setBytes(sName, q.outS);
    inits.get(sName).dims = [N * q.kb];
    setAttr(n, 'block_size', opts.blockSize);
    setAttr(n, 'bits', bits);
    count8 += bits === 8;
    if (n.output.some((o) => outputs.has(o))) head = { n, N, K, kb: q.kb, bits, bName, sName };
    if (opts.zeroPoints) {
      const zpName = zName || `${n.name || 'mmnb'}_zero_points_${count}`;
      if (!zName) {
        const t = { name: zpName, dataType: DT_UINT8, dims: [] };
        graph.initializer.push(t);
        tensors.push(t);
        inits.set(zpName, t);
        n.input.splice(3, n.input.length > 3 ? 1 : 0, zpName);
      }
      inits.get(zpName).dims = [N * (bits === 8 ? q.kb : Math.ceil(q.kb / 2))];
      setBytes(zpName, q.outZ);
    } else if (zName) {
      n.input[3] = ''; // an absent optional input; the initializer is dropped below
      while (n.input.length && !n.input[n.input.length - 1]) n.input.pop();
    }
    count++;
  }
  if (opts.tieEmbedding) tieEmbedding(graph, head, inits, opts.blockSize);
  // Initializers no node reads any more (dropped zero points, a tied float table) leave the graph.
  const read = new Set(graph.node.flatMap((n) => n.input));
  graph.initializer = graph.initializer.filter((t) => read.has(t.name) || !inits.has(t.name) ||
    (graph.output || []).some((o) => o.name === t.name));
  const kept = new Set(graph.initializer);
  for (let i = tensors.length - 1; i >= 0; i--) {
    if (inits.get(tensors[i].name) === tensors[i] && !kept.has(tensors[i])) tensors.splice(i, 1);
  }
  if (!count) throw new Error('no MatMulNBits node to requantize');
  if (opts.eightBit !== 'none' && !count8) throw new Error(`--eight-bit ${opts.eightBit}: no node matched`);

  // Every tensor with data goes to one new file, 64-byte aligned.
  fs.mkdirSync(output, { recursive: true });
  const dataName = 'model.onnx.data';
  const fd = fs.openSync(path.join(output, dataName), 'w');
  let off = 0;
  for (const t of tensors) {
    const buf = data.get(t);
    if (!buf) continue;
    off = Math.ceil(off / 64) * 64;
    fs.writeSync(fd, buf, 0, buf.length, off);
    t.externalData = [
      { key: 'location', value: dataName },
      { key: 'offset', value: String(off) },
      { key: 'length', value: String(buf.length) },
    ];
    t.dataLocation = LOC_EXTERNAL;
    t.rawData = Buffer.alloc(0);
    off += buf.length;
  }
  fs.closeSync(fd);
  fs.writeFileSync(path.join(output, modelFile), onnx.ModelProto.encode(model).finish());
  const skip = new Set([modelFile, ...[...files.values()].map((f) => f.loc)]);
  for (const e of fs.readdirSync(input, { withFileTypes: true })) {
    if (e.isFile() && !skip.has(e.name)) fs.copyFileSync(path.join(input, e.name), path.join(output, e.name));
  }
  process.stderr.write(`${PROG}: ${count} MatMulNBits nodes requantized in blocks of ${opts.blockSize}, ` +
    `${opts.zeroPoints ? 'with' : 'without'} zero points, ${count8} of them at 8 bits` +
    `${opts.tieEmbedding ? '; the embedding reads the LM head\'s codes' : ''}\n`);
}

function main() {
  const o = { blockSize: 32, zeroPoints: true, eightBit: 'none', tieEmbedding: false };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tie-embedding') {
      o.tieEmbedding = true;
      continue;
    }
    if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
    if (a === '--in') o.input = argv[++i];
    else if (a === '--out') o.output = argv[++i];
    else if (a === '--block-size') {
      const v = argv[++i];
      o.blockSize = Number(v);
      if (!/^[0-9]+$/.test(v) || o.blockSize < 16 || o.blockSize > 256 || o.blockSize & (o.blockSize - 1)) {
        throw new Error(`--block-size ${v}: a power of 2 from 16 to 256 expected`);
      }
    } else if (a === '--zero-points') {
      const v = argv[++i];
      if (v !== 'on' && v !== 'off') throw new Error(`--zero-points ${v}: on or off expected`);
      o.zeroPoints = v === 'on';
    } else if (a === '--eight-bit') {
      const v = argv[++i];
      if (!['none', 'head', 'mixed', 'all'].includes(v)) throw new Error(`--eight-bit ${v}: none, head, mixed or all expected`);
      o.eightBit = v;
    } else throw new Error(`unknown argument "${a}"`);
  }
  if (!o.input || !o.output) throw new Error('--in DIR and --out DIR are required');
  run(o);
}

try {
  main();
} catch (e) {
  process.stderr.write(`${PROG}: ${String(e.message).replace(/\s*\n\s*/g, ' ')}\n`);
  process.exit(1);
}
