#!/usr/bin/env node
// Checks logits dumps in the `generate --dump-logits` format (raw little-endian
// float32, one full vocabulary row per produced position).
//
//   check-logits.js stats FILE --rows N --vocab V [--ids 1,2,3]
//       exactly N rows, all finite, no row constant; with --ids, each row's
//       argmax must be the given id (the greedy ids a run reported).
//   check-logits.js same A B --vocab V
//       bit-for-bit equal; otherwise names the first differing row and column.
'use strict';

const fs = require('fs');

const PROG = 'check-logits';

function fail(msg) {
  process.stderr.write(`${PROG}: ${msg}\n`);
  process.exit(1);
}

function args(argv) {
  const o = { files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith('--')) {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      o[a.slice(2)] = argv[++i];
    } else {
      o.files.push(a);
    }
  }
  return o;
}

function count(o, k) {
  if (!/^\d+$/.test(o[k] || '') || Number(o[k]) < 1) fail(`--${k} needs a positive integer`);
  return Number(o[k]);
}

// Dumps of the tiny preset are a few MB; reading them whole is fine here.
function load(file, vocab) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    fail(e.message);
  }
  if (buf.length % (vocab * 4) !== 0) fail(`${file}: ${buf.length} bytes is not a whole number of ${vocab}-float rows`);
  const f = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const u = new Uint32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  return { f, u, rows: buf.length / (vocab * 4) };
}

function stats(o) {
  const [file] = o.files;
  if (!file) fail('stats needs a FILE');
  const vocab = count(o, 'vocab');
  const rows = count(o, 'rows');
  const d = load(file, vocab);
  if (d.rows !== rows) fail(`${file}: ${d.rows} rows of ${vocab} floats, expected ${rows}`);
  const ids = o.ids === undefined ? null : o.ids.split(',').map(Number);
  if (ids && ids.length !== rows) fail(`--ids has ${ids.length} ids for ${rows} rows`);
  let lo = Infinity, hi = -Infinity;
  for (let r = 0; r < rows; r++) {
    let rmin = Infinity, rmax = -Infinity, best = 0;
    for (let c = 0; c < vocab; c++) {
      const x = d.f[r * vocab + c];
      if (!Number.isFinite(x)) fail(`${file}: row ${r} column ${c} is ${x}`);
      if (x < rmin) rmin = x;
      if (x > rmax) { rmax = x; best = c; }
    }
    if (!(rmax > rmin)) fail(`${file}: row ${r} is constant (${rmin})`);
    if (ids && ids[r] !== best) fail(`${file}: row ${r} argmax is ${best} but the run reported id ${ids[r]}`);
    lo = Math.min(lo, rmin);
    hi = Math.max(hi, rmax);
  }
  process.stdout.write(`${file}: ${rows} rows x ${vocab}, finite, range [${lo}, ${hi}]\n`);
}

function same(o) {
  const [a, b] = o.files;
  if (!a || !b) fail('same needs two files');
  const vocab = count(o, 'vocab');
  const x = load(a, vocab);
  const y = load(b, vocab);
  if (x.rows !== y.rows) fail(`${a} has ${x.rows} rows, ${b} has ${y.rows}`);
  let n = 0, first = -1;
  for (let i = 0; i < x.u.length; i++) {
    if (x.u[i] !== y.u[i]) {
      if (first < 0) first = i;
      n++;
    }
  }
  if (n) {
    const r = Math.floor(first / vocab), c = first % vocab;
    fail(`${n} of ${x.u.length} floats differ; first at row ${r} column ${c}: ${x.f[first]} vs ${y.f[first]}`);
  }
  process.stdout.write(`${a} and ${b}: ${x.rows} rows, bit-for-bit equal\n`);
}

const o = args(process.argv.slice(2));
const cmd = o.files.shift();
if (cmd === 'stats') stats(o);
else if (cmd === 'same') same(o);
else fail('usage: check-logits.js stats FILE --rows N --vocab V [--ids L] | same A B --vocab V');
