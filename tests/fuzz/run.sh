#!/bin/sh
# Runs the libFuzzer binaries of tests/fuzz/ (built by `make fuzz-build`)
# and fails when any target reports a crash, a leak, undefined behaviour, a
# timeout or running out of memory. Each target starts from its checked-in
# corpus (tests/fuzz/corpus/TARGET/, plus the seeds tests/fuzz/seed_forms.sh
# writes for the onnx target) and its regression inputs
# (tests/fuzz/regress/TARGET/, read only), so every one of them is replayed
# first.
#
#   smoke: `make fuzz-smoke`, what CI runs. Each target makes a fixed number
#     of runs (TARGET=RUNS) from a fixed seed (FUZZ_SEED, default 1), from a
#     fresh copy of the corpus: the same commit on the same machine gives the
#     same executions, coverage and verdict every time.
#   long: `make fuzz`, by hand. Each target fuzzes for a time
#     (TARGET=SECONDS), unseeded, and keeps the corpus it grows in the build
#     tree for the next run. What it finds becomes a regression input.
#
# Ends with one line per target (executions, coverage, corpus, findings),
# a timing line (the only part that depends on the machine's load) and a
# verdict line; the reproducer of a failure is left in OUTDIR/MODE/TARGET/.
#
# Usage: run.sh SRCDIR OUTDIR smoke|long TARGET=N...
# Environment: QD_FUZZ_TOKENIZER (tokenizer.json for the tokenizer target),
# SEED_ONNX (the seed_onnx program, for the onnx target), NODE and NODE_PATH
# (for tests/fuzz/seed_forms.sh), FUZZ_SEED (smoke).
set -u
srcdir=$1 out=$2 mode=$3
shift 3
. "$srcdir/tests/fuzz/lsan.sh"
seed=${FUZZ_SEED:-1}
case "$mode" in
smoke | long) ;;
*) echo "fuzz: mode must be smoke or long, not '$mode'" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "fuzz: no targets given" >&2; exit 2; }
for arg in "$@"; do
  case "${arg#*=}" in
  '' | *[!0-9]*) echo "fuzz: '$arg' must be TARGET=N with N a whole number" >&2; exit 2 ;;
  esac
done
status=0
summary="" timing="" failed=""
total_execs=0 total_found=0

# One probe run tells whether leak checks can work here.
leaks=1
probe="$out/$mode/lsan-probe"
mkdir -p "$probe"
first=${1%%=*}
if ! lsan_works "$out/bin/fuzz_$first" -runs=0 "$probe"; then
  leaks=0
  echo "fuzz: LeakSanitizer cannot run here (ptrace not allowed?); fuzzing without leak checks" >&2
fi
rm -rf "$probe"

for arg in "$@"; do
  t=${arg%%=*} n=${arg#*=}
  bin="$out/bin/fuzz_$t"
  work="$out/$mode/$t"
  # smoke: nothing from an earlier run may change this one
  [ "$mode" = smoke ] && rm -rf "$work"
  mkdir -p "$work/corpus"
  rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$work"/slow-unit-*
  cp "$srcdir/tests/fuzz/corpus/$t/"* "$work/corpus/" 2>/dev/null || true
  # The checked-in files may be read-only (distcheck); the copies must not be.
  chmod -R u+w "$work/corpus"
  if [ "$t" = onnx ]; then
    sh "$srcdir/tests/fuzz/seed_forms.sh" "$SEED_ONNX" "$srcdir" "$work/corpus" ||
      { echo "fuzz: seed_forms.sh failed" >&2; exit 1; }
  fi
  regress=""
  [ -d "$srcdir/tests/fuzz/regress/$t" ] && regress="$srcdir/tests/fuzz/regress/$t"
  dict=""
  [ -f "$srcdir/tests/fuzz/$t.dict" ] && dict="-dict=$srcdir/tests/fuzz/$t.dict"
  if [ "$mode" = smoke ]; then
    # -reload=0: the corpus folder is read once (reloading is timed).
    # -use_cmp=0: no mutations from the operands of traced comparisons,
    # which include addresses (UBSan's pointer-overflow checks compare
    # pointers as integers) and so change from run to run with ASLR.
    how="-seed=$seed -runs=$n -reload=0 -use_cmp=0"
    wall=1800
    echo "fuzz-smoke: $t, $n runs from seed $seed"
  else
    how="-max_total_time=$n"
    wall=$((n + 300))
    echo "fuzz: $t for $n s"
  fi
  # Leaks are checked at the end of each input; -timeout catches hangs,
  # -rss_limit_mb and -malloc_limit_mb an input that makes the code allocate
  # without bound. `timeout` ends a run that outlives WALL seconds anyway (a
  # hang outside any one input), so CI cannot stall here.
  t0=$(date +%s)
  ASAN_OPTIONS="detect_leaks=$leaks:allocator_may_return_null=0:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
  TMPDIR="$work" \
    timeout -k 10 "$wall" \
    "$bin" $how -timeout=60 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
    -detect_leaks="$leaks" -print_final_stats=1 -artifact_prefix="$work/" $dict "$work/corpus" $regress \
    >"$work/log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n 1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$work/log" | tail -n 1)
  # "#N DONE cov: C ft: F corp: K/B ...": edges, features, inputs kept
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -n 1)
  cov=$(printf '%s' "$done_line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(printf '%s' "$done_line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  corp=$(printf '%s' "$done_line" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
  # Crash, leak, timeout and out-of-memory reproducers alike: libFuzzer
  # stops at the first, so this is 0 or 1.
  found=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  total_execs=$((total_execs + ${execs:-0}))
  total_found=$((total_found + found))
  line=$(printf '%-10s %9s execs  cov %5s  ft %6s  corpus %5s  findings %s' "$t" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$found")
  timing="$timing$(printf '%-10s %5s s  %7s execs/s  peak rss %5s MB' "$t" "$secs" "${speed:-?}" "${rss:-?}")
"
  if [ "$rc" -ne 0 ]; then
    status=1
    failed="$failed $t"
    case $rc in
    124 | 137) line="$line  FAILED (hung: ended after $wall s)" ;;
    *) line="$line  FAILED (exit $rc)" ;;
    esac
    echo "fuzz: $t failed; the end of its log ($work/log):" >&2
    tail -n 60 "$work/log" >&2
    for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [ -f "$a" ] && echo "fuzz: reproducer: $a (replay: $bin $a; once fixed, copy it into" \
        "tests/fuzz/regress/$t/ under a name saying what it is, see README.md)" >&2
    done
  fi
  summary="$summary$line
"
done
if [ "$mode" = smoke ]; then
  echo "fuzz-smoke summary (seed $seed):"
else
  echo "fuzz summary (unseeded):"
fi
printf '%s' "$summary"
echo "timing (varies with the machine and its load):"
printf '%s' "$timing"
if [ "$status" -eq 0 ]; then
  echo "fuzz: OK: $# targets, $total_execs executions, 0 findings"
else
  echo "fuzz: FAILED:$failed (findings: $total_found; reproducers and logs under $out/$mode/)"
fi
exit $status
