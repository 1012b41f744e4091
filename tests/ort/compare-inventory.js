#!/usr/bin/env node
// Compares two graph inventories (`qwen3d inspect --json` or onnx-inventory.js
// output) on the keys that must not change when a model is only written
// differently, and names every difference by its JSON path.
//
// Usage: compare-inventory.js A.json B.json [--keys k1,k2,...]
//   Default keys: ops, initializer_count, inputs, outputs (required in both),
//   plus node_count, opsets, geometry, weight_bytes and the per-node kernel
//   assignment, compared when both files have them. Inputs and outputs are
//   compared by name, not position: a writer may list them in any order, and
//   nodes as a multiset of (domain, op, kernel) since names and order differ.
'use strict';

const fs = require('fs');

const PROG = 'compare-inventory';
const REQUIRED = ['ops', 'initializer_count', 'inputs', 'outputs'];
const OPTIONAL = ['node_count', 'opsets', 'geometry', 'weight_bytes', 'nodes'];
const MAX_REPORT = 20;

function fail(msg) {
  process.stderr.write(`${PROG}: ${msg}\n`);
  process.exit(1);
}

function load(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`${file}: ${e.message}`);
  }
  return null;
}

// Key-specific views: what may legitimately differ is projected away.
function view(key, v) {
  if ((key === 'inputs' || key === 'outputs') && Array.isArray(v)) {
    return Object.fromEntries(v.map((x) => [x.name, x]));
  }
  if (key === 'nodes' && Array.isArray(v)) {
    const bag = {};
    for (const n of v) {
      const k = `${n.domain}::${n.op} -> ${n.kernel}`;
      bag[k] = (bag[k] || 0) + 1;
    }
    return bag;
  }
  return v;
}

function diff(a, b, where, out) {
  if (out.length > MAX_REPORT) return;
  const ta = Array.isArray(a) ? 'array' : typeof a;
  const tb = Array.isArray(b) ? 'array' : typeof b;
  if (ta !== tb || a === null || b === null || ta !== 'object' && ta !== 'array') {
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${where}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    return;
  }
  if (ta === 'array') {
    if (a.length !== b.length) out.push(`${where}: ${a.length} vs ${b.length} elements`);
    for (let i = 0; i < Math.min(a.length, b.length); i++) diff(a[i], b[i], `${where}[${i}]`, out);
    return;
  }
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (!(k in a)) out.push(`${where}.${k}: missing vs ${JSON.stringify(b[k])}`);
    else if (!(k in b)) out.push(`${where}.${k}: ${JSON.stringify(a[k])} vs missing`);
    else diff(a[k], b[k], `${where}.${k}`, out);
  }
}

const argv = process.argv.slice(2);
const files = [];
let keys = null;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--keys') keys = (argv[++i] || '').split(',').filter(Boolean);
  else files.push(argv[i]);
}
if (files.length !== 2) fail('usage: compare-inventory.js A.json B.json [--keys k1,k2]');
const [fa, fb] = files;
const a = load(fa);
const b = load(fb);
const required = keys || REQUIRED;
const optional = keys ? [] : OPTIONAL;
const out = [];
const compared = [];
for (const k of required) {
  if (!(k in a) || !(k in b)) {
    out.push(`${k}: missing in ${!(k in a) ? fa : fb}`);
    continue;
  }
  diff(view(k, a[k]), view(k, b[k]), k, out);
  compared.push(k);
}
for (const k of optional) {
  if (!(k in a) || !(k in b)) continue;
  diff(view(k, a[k]), view(k, b[k]), k, out);
  compared.push(k);
}
if (out.length) {
  process.stderr.write(`${PROG}: ${fa} (first) and ${fb} (second) differ:\n`);
  for (const l of out.slice(0, MAX_REPORT)) process.stderr.write(`  ${l}\n`);
  if (out.length > MAX_REPORT) process.stderr.write('  ...\n');
  process.exit(1);
}
process.stdout.write(`inventories agree on ${compared.join(', ')}\n`);
