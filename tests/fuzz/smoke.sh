#!/bin/sh
# `make fuzz-smoke`: runs each libFuzzer binary of tests/fuzz/ for a bounded
# time, starting from the checked-in seeds (copied into the build tree, so a
# read-only source tree is fine and the corpus grows across runs), and fails
# when any target reports a crash, a leak, undefined behaviour, a timeout
# or running out of memory. Ends with one line per target (executions,
# speed, corpus size, crashes) and a verdict line; the reproducer of a
# failure is left in OUTDIR/work/TARGET/. CI runs it (deploy/test.sh), so it
# fails only on a finding: where LeakSanitizer cannot run at all it says so
# and fuzzes without leak checks, and a run that hangs is ended.
#
# Usage: smoke.sh SRCDIR OUTDIR SECONDS TARGET...
# Environment: QD_FUZZ_TOKENIZER (tokenizer.json for the tokenizer target),
# SEED_ONNX (the seed_onnx program, for the onnx target).
set -u
srcdir=$1 out=$2 secs=${3:-60}
shift 3
case "$secs" in '' | *[!0-9]*) echo "fuzz-smoke: FUZZ_SECONDS must be a whole number, not '$secs'" >&2; exit 2 ;; esac
status=0
summary=""
failed=""
total_execs=0
total_crashes=0

# LeakSanitizer stops the process's threads with ptrace; where that is not
# allowed (under strace or gdb, in some sandboxes) it ends every run with a
# fatal error that is no finding. One probe run tells.
leaks=1
probe="$out/work/lsan-probe"
mkdir -p "$probe"
ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" "$out/bin/fuzz_$1" -runs=0 -artifact_prefix="$probe/" "$probe" \
  >"$probe.log" 2>&1
if grep -q 'LeakSanitizer has encountered a fatal error' "$probe.log"; then
  leaks=0
  echo "fuzz-smoke: LeakSanitizer cannot run here (ptrace not allowed?); fuzzing without leak checks" >&2
fi
rm -rf "$probe" "$probe.log"

for t in "$@"; do
  bin="$out/bin/fuzz_$t"
  work="$out/work/$t"
  mkdir -p "$work/corpus"
  cp "$srcdir/tests/fuzz/corpus/$t/"* "$work/corpus/" 2>/dev/null || true
  # The checked-in files may be read-only (distcheck); the copies must not be.
  chmod -R u+w "$work/corpus"
  if [ "$t" = onnx ]; then
    "$SEED_ONNX" "$work/corpus" || { echo "fuzz-smoke: seed_onnx failed" >&2; exit 1; }
  fi
  dict=""
  [ -f "$srcdir/tests/fuzz/$t.dict" ] && dict="-dict=$srcdir/tests/fuzz/$t.dict"
  rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$work"/slow-unit-*
  echo "fuzz-smoke: $t for $secs s"
  # Leaks are checked at the end of each input; -timeout catches hangs,
  # -rss_limit_mb and -malloc_limit_mb an input that makes the code allocate
  # without bound. `timeout` ends a run that outlives its time anyway (a hang
  # outside any one input), so CI cannot stall here.
  ASAN_OPTIONS="detect_leaks=$leaks:allocator_may_return_null=0:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
  TMPDIR="$work" \
    timeout -k 10 $((secs + 300)) \
    "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
    -detect_leaks="$leaks" -print_final_stats=1 -artifact_prefix="$work/" $dict "$work/corpus" >"$work/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n 1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$work/log" | tail -n 1)
  files=$(find "$work/corpus" -type f | wc -l)
  # Crash, leak, timeout and out-of-memory reproducers alike: libFuzzer
  # stops at the first, so this is 0 or 1.
  crashes=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  total_execs=$((total_execs + ${execs:-0}))
  total_crashes=$((total_crashes + crashes))
  line=$(printf '%-10s %10s execs %7s/s  corpus %5s files  crashes %s  peak rss %s MB' "$t" "${execs:-?}" \
    "${speed:-?}" "$files" "$crashes" "${rss:-?}")
  if [ "$rc" -ne 0 ]; then
    status=1
    failed="$failed $t"
    case $rc in
    124 | 137) line="$line  FAILED (hung: ended after $((secs + 300)) s)" ;;
    *) line="$line  FAILED (exit $rc)" ;;
    esac
    echo "fuzz-smoke: $t failed; the end of its log ($work/log):" >&2
    tail -n 60 "$work/log" >&2
    for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [ -f "$a" ] && echo "fuzz-smoke: reproducer: $a (replay: $bin $a)" >&2
    done
  fi
  summary="$summary$line
"
done
echo "fuzz-smoke summary ($secs s per target):"
printf '%s' "$summary"
if [ "$status" -eq 0 ]; then
  echo "fuzz-smoke: OK: $# targets, $total_execs executions, 0 crashes"
else
  echo "fuzz-smoke: FAILED:$failed (crashes: $total_crashes; reproducers and logs under $out/work/)"
fi
exit $status
