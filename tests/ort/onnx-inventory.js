#!/usr/bin/env node
// Prints a model folder's graph inventory straight from model.onnx (through the
// onnx-proto schema, independent of qwen3d's loader), in the shape of the
// matching keys of `qwen3d inspect --json`: node_count, initializer_count,
// ops {domain: {op: count}}, inputs and outputs [{name, dtype, shape}].
//
// Usage: onnx-inventory.js --model DIR
'use strict';

const fs = require('fs');
const path = require('path');

const DTYPES = {
  1: 'FLOAT', 2: 'UINT8', 3: 'INT8', 4: 'UINT16', 5: 'INT16', 6: 'INT32', 7: 'INT64', 8: 'STRING',
  9: 'BOOL', 10: 'FLOAT16', 11: 'DOUBLE', 12: 'UINT32', 13: 'UINT64', 16: 'BFLOAT16',
};

const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

function io(list) {
  return list.map((v) => {
    const tt = v.type && v.type.tensorType;
    const dims = (tt && tt.shape && tt.shape.dim) || [];
    return {
      name: v.name,
      dtype: tt ? DTYPES[tt.elemType] || String(tt.elemType) : '?',
      shape: dims.map((d) => (has(d, 'dimParam') ? d.dimParam : has(d, 'dimValue') ? Number(String(d.dimValue)) : '?')),
    };
  });
}

function inventory(dir) {
  let file = 'model.onnx';
  const cfg = path.join(dir, 'genai_config.json');
  if (fs.existsSync(cfg)) {
    const d = (JSON.parse(fs.readFileSync(cfg, 'utf8')).model || {}).decoder || {};
    file = d.filename || file;
  }
  const { onnx } = require('onnx-proto');
  const g = onnx.ModelProto.decode(fs.readFileSync(path.join(dir, file))).graph;
  const ops = {};
  for (const n of g.node) {
    const d = n.domain || 'ai.onnx';
    ops[d] = ops[d] || {};
    ops[d][n.opType] = (ops[d][n.opType] || 0) + 1;
  }
  return {
    node_count: g.node.length,
    initializer_count: g.initializer.length,
    ops,
    inputs: io(g.input),
    outputs: io(g.output),
  };
}

module.exports = { inventory };

if (require.main === module) {
  const argv = process.argv.slice(2);
  if (argv.length !== 2 || argv[0] !== '--model') {
    process.stderr.write('onnx-inventory: usage: onnx-inventory.js --model DIR\n');
    process.exit(1);
  }
  try {
    process.stdout.write(JSON.stringify(inventory(argv[1]), null, 1) + '\n');
  } catch (e) {
    process.stderr.write(`onnx-inventory: ${argv[1]}: ${String(e.message).replace(/\s*\n\s*/g, ' ')}\n`);
    process.exit(1);
  }
}
