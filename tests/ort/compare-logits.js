#!/usr/bin/env node
// Compares qwen3d's teacher-forced logits with ONNX Runtime's on the same model.
//
//   compare-logits.js --ours A --ort B --ort-fp32 C --vocab V [--label TEXT]
//                     [--ref R] [--factor F]
//
// B is ONNX Runtime at the model's accuracy_level (4: int8 activations), C the
// same model at accuracy_level 0 (fp32 activations). Their largest difference
// is the spread ONNX Runtime itself allows between two valid numerics, and is
// the tolerance: every row of A must be within it of B. Where B's top-1 margin
// exceeds twice the tolerance the choice is unambiguous, and A's argmax must
// agree. Prints the figures as one JSON line; exits 1 naming the first failure.
//
// With --ref, A is compared with R instead of B (B and C then only give the
// tolerance: e.g. the ORT form's spread for a standard contract's exact
// reference R, or a BF16-rounding variant's distance from its FP32 carrier);
// --factor scales the tolerance (default 1; below 1 where A and R compute the
// same fp32 numerics, e.g. qwen3d --matmul-fp32 against accuracy_level 0, so
// they must agree far more closely than two numerics do).
'use strict';

const fs = require('fs');

function fail(msg) {
  process.stderr.write(`compare-logits: ${msg}\n`);
  process.exit(1);
}

function parse(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) fail(`bad argument "${argv[i]}"`);
    o[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['ours', 'ort', 'ort-fp32', 'vocab']) if (!o[k]) fail(`--${k} is required`);
  return o;
}

function rows(file, vocab) {
  const b = fs.readFileSync(file);
  if (b.length % (4 * vocab)) fail(`${file}: ${b.length} bytes is not a whole number of ${vocab}-float rows`);
  const f = new Float32Array(b.buffer, b.byteOffset, b.length / 4);
  const out = [];
  for (let r = 0; r < f.length / vocab; r++) out.push(f.subarray(r * vocab, (r + 1) * vocab));
  return out;
}

function top2(row) {
  let i1 = 0, v1 = -Infinity, v2 = -Infinity;
  for (let i = 0; i < row.length; i++) {
    const v = row[i];
    if (v > v1) { v2 = v1; v1 = v; i1 = i; } else if (v > v2) { v2 = v; }
  }
  return { arg: i1, margin: v1 - v2 };
}

function maxDiff(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = d; // NaN propagates as a failure below
  }
  return m;
}

const o = parse(process.argv.slice(2));
const V = Number(o.vocab);
const factor = o.factor === undefined ? 1 : Number(o.factor);
if (!(factor > 0)) fail(`--factor ${o.factor} is not a positive number`);
const ours = rows(o.ours, V), spreadA = rows(o.ort, V), ort0 = rows(o['ort-fp32'], V);
const ort = o.ref ? rows(o.ref, V) : spreadA;
if (ours.length !== ort.length || ort0.length !== ort.length || spreadA.length !== ort.length)
  fail(`row counts differ: ours ${ours.length}, reference ${ort.length}, ort ${spreadA.length}, ort fp32 ${ort0.length}`);
if (!ort.length) fail('no rows');

let spread = 0;
for (let r = 0; r < ort.length; r++) spread = Math.max(spread, maxDiff(spreadA[r], ort0[r]));
if (!(spread > 0)) fail(`the two ONNX Runtime runs agree exactly (${spread}); the second variant did not take effect`);
const tol = factor * spread;

let worst = 0, worstRow = 0, checked = 0;
for (let r = 0; r < ort.length; r++) {
  const d = maxDiff(ours[r], ort[r]);
  if (!(d <= tol)) fail(`${o.label || ''} row ${r}: max |qwen3d - ORT| = ${d} exceeds the tolerance ${tol}`);
  if (d > worst) { worst = d; worstRow = r; }
  const ref = top2(ort[r]);
  if (ref.margin > 2 * tol) {
    checked++;
    const mine = top2(ours[r]).arg;
    if (mine !== ref.arg)
      fail(`${o.label || ''} row ${r}: argmax ${mine} differs from ONNX Runtime's ${ref.arg} (margin ${ref.margin}, tolerance ${tol})`);
  }
}
process.stdout.write(JSON.stringify({
  label: o.label || '', rows: ort.length, spread: spread, factor: factor, tolerance: tol,
  max_diff_vs_ort: worst, worst_row: worstRow, ratio: worst / tol, argmax_checked_rows: checked,
}) + '\n');
