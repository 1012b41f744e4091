#!/usr/bin/env bash
# Builds qwen3d in build/ and runs the test suite, then `make fuzz-smoke`
# (each libFuzzer target for a fixed number of runs from a fixed seed, so the
# same commit always gets the same verdict), then `make distcheck`.
# Usage: bash deploy/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh --test

[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure --enable-werror
make -j"$(nproc)"

summary() {
  local log=test-suite.log pass fail skip
  pass=$(sed -n 's/^# PASS: *//p' "$log" | head -n1)
  fail=$(( $(sed -n 's/^# FAIL: *//p' "$log" | head -n1) + $(sed -n 's/^# ERROR: *//p' "$log" | head -n1) ))
  skip=$(sed -n 's/^# SKIP: *//p' "$log" | head -n1)
  echo "tests: ${pass:-0} passed, ${fail:-0} failed, ${skip:-0} skipped"
}
# failed_logs DIR: the last lines of each failed test's log under DIR.
failed_logs() {
  for f in $(grep -l '^FAIL\|^ERROR' "$1"/*.log 2>/dev/null); do echo "== $f"; tail -n 60 "$f"; done
}
status=0
make -j"$(nproc)" check || status=$?
summary
if [ "$status" -ne 0 ]; then
  failed_logs tests
  exit "$status"
fi
make -j"$(nproc)" fuzz-smoke
# distcheck runs the suite again from the tarball; a failure there leaves
# its build tree behind, with the logs.
status=0
make -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror || status=$?
if [ "$status" -ne 0 ]; then
  for d in qwen3d-*/_build/sub/tests; do [ -d "$d" ] && failed_logs "$d"; done
  exit "$status"
fi
