# Sourced by tests/fuzz/run.sh and tests/fuzz_replay.sh.
#
# lsan_works CMD...: runs CMD (a sanitized program that exits quickly) with
# leak detection on and fails when LeakSanitizer cannot work here: it stops
# the process's threads with ptrace, which some sandboxes and debuggers
# forbid, and then ends every run with a fatal error that is no finding.
lsan_works() {
  if ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" "$@" 2>&1 | grep -q 'LeakSanitizer has encountered a fatal error'; then
    return 1
  fi
  return 0
}
