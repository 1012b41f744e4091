#!/usr/bin/env node
// Runs small single-node ONNX models through onnxruntime-node and writes their
// outputs, so the engine's per-op results can be compared with ONNX Runtime's.
//
// Usage: run-graph.js CASES_DIR
// Each subfolder of CASES_DIR holding a case.json is one case:
//   {"inputs": [{"name", "dtype", "dims", "file"}], "outputs": ["name", ...]}
// with raw little-endian input files beside it. For each output i the script
// writes ort_out_<i>.bin and ort.json ({"outputs": [{"name","dtype","dims"}]});
// if ONNX Runtime rejects the run, ort.json holds {"error": message} instead.
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const ARRAYS = {
  float32: Float32Array,
  int64: BigInt64Array,
  int32: Int32Array,
  uint8: Uint8Array,
};

function load(file, dtype) {
  const buf = fs.readFileSync(file);
  const Arr = ARRAYS[dtype];
  if (!Arr) throw new Error(`unsupported dtype ${dtype}`);
  const copy = new Uint8Array(buf.length);
  copy.set(buf);
  return new Arr(copy.buffer, 0, buf.length / Arr.BYTES_PER_ELEMENT);
}

async function runCase(dir) {
  const spec = JSON.parse(fs.readFileSync(path.join(dir, 'case.json'), 'utf8'));
  const feeds = {};
  for (const i of spec.inputs) feeds[i.name] = new ort.Tensor(i.dtype, load(path.join(dir, i.file), i.dtype), i.dims);
  let result;
  try {
    const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      graphOptimizationLevel: 'disabled',
      // fatal only: expected failures are reported in ort.json, and declared
      // output shapes are left symbolic on purpose
      logSeverityLevel: 4,
    });
    const out = await session.run(feeds, spec.outputs);
    result = { outputs: [] };
    spec.outputs.forEach((name, i) => {
      const t = out[name];
      const bytes = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      fs.writeFileSync(path.join(dir, `ort_out_${i}.bin`), bytes);
      result.outputs.push({ name, dtype: t.type, dims: t.dims.map(Number) });
    });
    if (session.release) await session.release();
  } catch (e) {
    result = { error: String(e.message || e).replace(/\s+/g, ' ').trim() };
  }
  fs.writeFileSync(path.join(dir, 'ort.json'), JSON.stringify(result));
}

async function main() {
  const root = process.argv[2];
  if (!root) {
    process.stderr.write('usage: run-graph.js CASES_DIR\n');
    process.exit(2);
  }
  const dirs = fs.readdirSync(root).map((d) => path.join(root, d))
    .filter((d) => fs.existsSync(path.join(d, 'case.json'))).sort();
  for (const d of dirs) await runCase(d);
}

main().catch((e) => {
  process.stderr.write(`run-graph: ${String(e.message || e).replace(/\s+/g, ' ')}\n`);
  process.exit(1);
});
