#!/bin/sh
# A soak of `qwen3d serve` with injected faults on the tiny model
# (tests/soak/soak.js: client disconnects, slow readers, malformed and
# oversized requests, half-sent requests, a full queue, greedy requests of
# n = 2 choices beside single ones), for SOAK_SECONDS
# (default 60) with SOAK_CLIENTS (default 6) concurrent clients; then the
# daemon must drain on SIGTERM and exit 0 (with --enable-sanitizers: no
# leak, no error report). `make soak` runs it longer, outside the suite.
# The prefix cache is on, with a budget of about three of the soak's
# prompts (SOAK_PREFIX_BYTES) and a minimum length its shared preamble
# passes, so requests hit, miss and evict under load; soak.js requires
# its bytes within the budget in every scrape.
NAME=soak
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
SOAK_PREFIX_BYTES=${SOAK_PREFIX_BYTES:-200000}
export SOAK_PREFIX_BYTES
serve_start --parallel 2 --queue 3 --ctx 256 --max-body 16384 --max-header-bytes 4096 --idle-timeout 5 \
  --prefix-cache-bytes "$SOAK_PREFIX_BYTES" --prefix-min-tokens 8
# A sanitizer's allocator keeps freed memory in quarantine: resident memory
# says nothing about leaks there (LeakSanitizer at exit does).
[ "${QD_SANITIZERS:-0}" = 1 ] && SOAK_RSS=0 && export SOAK_RSS
"$NODE" "$QD_SRCDIR/tests/soak/soak.js" "$BASE" "$PID" "${SOAK_SECONDS:-60}" "${SOAK_CLIENTS:-6}" ||
  fail "the soak found problems"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS after the soak"
grep -q 'runtime error\|ERROR: AddressSanitizer\|LeakSanitizer' "$LOG" && fail "a sanitizer reported an error"
echo "soak: the daemon drained and exited cleanly"
rm -rf "$work"
