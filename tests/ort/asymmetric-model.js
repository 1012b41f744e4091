#!/usr/bin/env node
// Writes a model folder again with every 4-bit MatMulNBits weight quantized
// asymmetrically, as an export made with int4_is_symmetric=false is: per
// column and block of 32 the weights (dequantized from the source) get
// scale = (max - min) / 15 and a 4-bit zero point round(-min / scale), and
// the node gains its zero_points input (UINT8, two per byte, even block in
// the low nibble). Everything else is kept; all tensors go to one new data
// file. ONNX Runtime and qwen3d then run the same asymmetric graph.
//
// Usage: asymmetric-model.js --in DIR --out DIR
'use strict';

const fs = require('fs');
const path = require('path');
const { loadOnnx, dataTensors, resolveExternal, LOC_EXTERNAL } = require('./rewrite-model.js');

const PROG = 'asymmetric-model';
const DT_FLOAT = 1, DT_UINT8 = 2;

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

// One column's blocks: codes and scales (symmetric source, zero point 8 or
// the node's own) -> asymmetric codes, scales and zero points.
function requantize(b, sc, zpIn, N, K, kb) {
  const bs = 32, blob = bs / 2;
  const outB = Buffer.alloc(N * kb * blob);
  const outS = Buffer.alloc(N * kb * 4);
  const zb = Math.ceil(kb / 2);
  const outZ = Buffer.alloc(N * zb);
  const w = new Float32Array(bs);
  for (let n = 0; n < N; n++) {
    for (let j = 0; j < kb; j++) {
      const s = sc.readFloatLE((n * kb + j) * 4);
      const z0 = zpIn ? (zpIn[n * zb + (j >> 1)] >> (4 * (j & 1))) & 15 : 8;
      const len = Math.min(bs, K - j * bs);
      let lo = Infinity, hi = -Infinity;
      for (let t = 0; t < len; t++) {
        const byte = b[(n * kb + j) * blob + (t >> 1)];
        const q = (t & 1) ? byte >> 4 : byte & 15;
        w[t] = Math.fround((q - z0) * s);
        lo = Math.min(lo, w[t]);
        hi = Math.max(hi, w[t]);
      }
      lo = Math.min(lo, 0);
      hi = Math.max(hi, 0);
      const scale = hi > lo ? Math.fround((hi - lo) / 15) : 1;
      const zp = Math.min(15, Math.max(0, Math.round(-lo / scale)));
      outS.writeFloatLE(scale, (n * kb + j) * 4);
      outZ[n * zb + (j >> 1)] |= zp << (4 * (j & 1));
      for (let t = 0; t < len; t++) {
        const q = Math.min(15, Math.max(0, Math.round(w[t] / scale) + zp));
        outB[(n * kb + j) * blob + (t >> 1)] |= (t & 1) ? q << 4 : q;
      }
    }
  }
  return { outB, outS, outZ };
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

  let count = 0;
  for (const n of graph.node) {
    if (n.opType !== 'MatMulNBits' || n.domain !== 'com.microsoft') continue;
    if (attr(n, 'bits', 4) !== 4 || attr(n, 'block_size', 0) !== 32) {
      throw new Error(`node "${n.name}": only 4-bit weights in blocks of 32 are requantized`);
    }
    const N = attr(n, 'N', 0), K = attr(n, 'K', 0), kb = Math.ceil(K / 32);
    const [bName, sName] = [n.input[1], n.input[2]];
    const zName = n.input.length > 3 && n.input[3] ? n.input[3] : null;
    if (!bytesOf(bName) || !bytesOf(sName) || inits.get(sName).dataType !== DT_FLOAT) {
      throw new Error(`node "${n.name}": B and FLOAT scales must be initializers with data`);
    }
    const q = requantize(bytesOf(bName), bytesOf(sName), zName ? bytesOf(zName) : null, N, K, kb);
    setBytes(bName, q.outB);
    setBytes(sName, q.outS);
    const zpName = zName || `${n.name || 'mmnb'}_zero_points_${count}`;
    if (!zName) {
      const t = { name: zpName, dataType: DT_UINT8, dims: [N * Math.ceil(kb / 2)] };
      graph.initializer.push(t);
      tensors.push(t);
      inits.set(zpName, t);
      n.input.splice(3, n.input.length > 3 ? 1 : 0, zpName);
    }
    setBytes(zpName, q.outZ);
    count++;
  }
  if (!count) throw new Error('no MatMulNBits node to requantize');

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
  process.stderr.write(`${PROG}: ${count} MatMulNBits nodes requantized with zero points\n`);
}

function main() {
  const o = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
    if (a === '--in') o.input = argv[++i];
    else if (a === '--out') o.output = argv[++i];
    else throw new Error(`unknown argument "${a}"`);
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
