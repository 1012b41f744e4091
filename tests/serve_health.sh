#!/bin/sh
# Health of `qwen3d serve` as systemd sees it, black-box on the tiny model:
#  - the watchdog sees a stuck compute thread: with a step hung through the
#    test-only hook of tests/serve/qwen3d-hooks (QWEN3D_TEST_STALL: the step
#    waits while that file exists), WATCHDOG=1 pings stop once the step has
#    run past its bound (here half of WATCHDOG_USEC), /health answers 503
#    compute_stuck and the log says so; when the step goes on, the request
#    completes, the pings resume and /health is 200 again;
#  - each daemon exits 0 on SIGTERM (with --enable-sanitizers: no leak).
NAME=serve_health
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
hooks="$QD_BUILDDIR/tests/serve/qwen3d-hooks"
[ -x "$hooks" ] || fail "$hooks is missing (make check builds it)"

# wait_until WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds, 30 s at most.
wait_until() {
  what=$1
  shift
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "$what: not within 30 s"
    sleep 0.1
  done
}
pings() { grep -c 'WATCHDOG=1' "$work/notify.txt" || true; }
status_is() { [ "$(http GET "$1")" = "$2" ]; }

# ---- the watchdog and a stuck compute thread ----------------------------------
sock_dir=$(mktemp -d /tmp/qwen3d-notify.XXXXXX)
EXTRA_DIRS="$sock_dir"
sock="$sock_dir/notify.sock"
"$QD_BUILDDIR/tests/serve/notify_listen" "$sock" 120 >"$work/notify.txt" &
EXTRA_PIDS="$!"
wait_until "the notify listener" test -S "$sock"
stall="$work/stall"
real=$QWEN3D
QWEN3D=$hooks
NOTIFY_SOCKET="$sock" WATCHDOG_USEC=2000000 QWEN3D_TEST_STALL="$stall" serve_start
QWEN3D=$real
wait_until "2 pings while idle" [ "$(pings)" -ge 2 ]
status_is /health 200 || fail "/health before the stall: $(cat "$work/body")"

touch "$stall"
curl -s -m 60 -o "$work/stalled.json" "$BASE/v1/completions" -d '{"prompt":"Hello","max_tokens":4,"temperature":0}' &
CURL=$!
EXTRA_PIDS="$EXTRA_PIDS $CURL"
wait_until "/health 503 with the step hung" status_is /health 503
[ "$(json "$work/body" 'j.error.code')" = compute_stuck ] || fail "/health body while stuck: $(cat "$work/body")"
grep -q 'event=compute_stuck ' "$LOG" || fail "no compute_stuck line in the log"
# The last ping before the 503 has reached the listener within a second;
# none follows while the step is stuck (three intervals here).
sleep 1
before=$(pings)
sleep 3
[ "$(pings)" = "$before" ] || fail "WATCHDOG=1 went on with the compute thread stuck: $(cat "$work/notify.txt")"

rm -f "$stall"
wait "$CURL" || fail "the request whose step hung failed"
[ "$(json "$work/stalled.json" 'j.usage.completion_tokens')" = 4 ] || fail "the stalled request: $(cat "$work/stalled.json")"
wait_until "/health 200 once the step went on" status_is /health 200
wait_until "pings once the step went on" [ "$(pings)" -gt "$before" ]
grep -q 'event=compute_recovered ' "$LOG" || fail "no compute_recovered line in the log"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
echo "serve_health: all checks passed"
rm -rf "$work"
