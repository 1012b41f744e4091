#!/bin/sh
# Health of `qwen3d serve` as balancers and systemd see it, black-box on
# the tiny model:
#  - while the model loads: /health/live 200, /health/ready and /health 503
#    model_loading; once loaded, all three 200;
#  - --parallel 1 --queue 0 with a generation running: /health/ready 503
#    queue_full while /health and /health/live stay 200; 200 again once the
#    client has gone; the endpoints have their own metric labels;
#  - a stuck compute thread: with a step hung through the test-only hook of
#    tests/serve/qwen3d-hooks (QWEN3D_TEST_STALL: the step waits while that
#    file exists), WATCHDOG=1 pings stop once the step has run past its
#    bound (here half of WATCHDOG_USEC), /health, /health/live and
#    /health/ready answer 503 compute_stuck and the log says so; when the
#    step goes on, the request completes, the pings resume and all is 200;
#  - SIGTERM with drain-delay (a --config key here): STOPPING=1 at once,
#    /health/ready and /health 503 shutting_down, /health/live 200, and new
#    connections are still served until the delay ends; then the drain
#    closes the listener and the daemon exits 0. SIGINT drains at once;
#  - each daemon exits 0 on SIGTERM (with --enable-sanitizers: no leak).
NAME=serve_health
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
pings() { grep -c 'WATCHDOG=1' "$work/notify.txt" || true; }
# pings_over N: more than N pings so far (a command, so wait_until re-runs it).
pings_over() { [ "$(pings)" -gt "$1" ]; }
status_is() { [ "$(http GET "$1")" = "$2" ]; }
# expect PATH STATUS [CODE]: PATH answers STATUS, with error code CODE.
expect() {
  got=$(http GET "$1")
  [ "$got" = "$2" ] || fail "GET $1: $got, expected $2: $(cat "$work/body")"
  if [ -n "${3:-}" ]; then
    [ "$(json "$work/body" 'j.error.code')" = "$3" ] || fail "GET $1: expected code $3: $(cat "$work/body")"
  fi
}

# ---- loading, readiness, a full queue -------------------------------------------
slow_model
SERVE_NO_WAIT=1 SERVE_MODEL="$SLOW_MODEL" serve_start --parallel 1 --queue 0
expect /health/live 200
expect /health/ready 503 model_loading
expect /health 503 model_loading
release_model
for p in /health/live /health/ready /health; do expect $p 200; done
[ "$(json "$work/body" 'j.status')" = ok ] || fail "/health body: $(cat "$work/body")"

curl -s -m 60 -N -o "$work/long.sse" "$BASE/v1/completions" \
  -d '{"prompt":"Hello","max_tokens":4000,"temperature":0,"stream":true}' &
CURL=$!
EXTRA_PIDS="$EXTRA_PIDS $CURL"
wait_until "the long stream starting" test -s "$work/long.sse"
expect /health/ready 503 queue_full
expect /health 200
expect /health/live 200
kill "$CURL"
wait "$CURL" || true
wait_until "/health/ready 200 once the client left" status_is /health/ready 200
curl -s -m 10 "$BASE/metrics" >"$work/metrics"
for l in 'endpoint="/health/live",code="200"' 'endpoint="/health/ready",code="503"' \
  'endpoint="/health/ready",code="200"'; do
  grep -q "^qwen3d_requests_total{model_name=\"[^\"]*\",$l} " "$work/metrics" || fail "no qwen3d_requests_total{$l}"
done
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# ---- the watchdog and a stuck compute thread ----------------------------------
notify_listen 120
stall="$work/stall"
NOTIFY_SOCKET="$NOTIFY_SOCK" WATCHDOG_USEC=2000000 serve_start_hooks "$stall"
wait_until "2 pings while idle" pings_over 1
expect /health 200

touch "$stall"
curl -s -m 60 -o "$work/stalled.json" "$BASE/v1/completions" -d '{"prompt":"Hello","max_tokens":4,"temperature":0}' &
CURL=$!
EXTRA_PIDS="$EXTRA_PIDS $CURL"
wait_until "/health 503 with the step hung" status_is /health 503
for p in /health /health/live /health/ready; do expect $p 503 compute_stuck; done
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
for p in /health/live /health/ready; do expect $p 200; done
wait_until "pings once the step went on" pings_over "$before"
grep -q 'event=compute_recovered ' "$LOG" || fail "no compute_recovered line in the log"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# ---- SIGTERM: not ready first, then the drain -----------------------------------
# The requests of the not-ready period take well under a second; the log is
# read after them, so a machine too slow for the delay fails for that reason.
notify_listen 120
printf 'model = %s\ndrain-delay = 15\n' "$MODEL" >"$work/delay.conf"
NOTIFY_SOCKET="$NOTIFY_SOCK" SERVE_DRAIN_DELAY=default serve_start --config "$work/delay.conf"
expect /health/ready 200
kill -TERM "$PID"
wait_until "the not_ready line" grep -q 'event=not_ready reason=SIGTERM drain_delay_s=15' "$LOG"
code_of() { json "$work/body" 'j.error ? j.error.code : j.status || j.object' 2>/dev/null || true; }
ready="$(http GET /health/ready) $(code_of)"
health="$(http GET /health) $(code_of)"
live="$(http GET /health/live) $(code_of)"
gen="$(http POST /v1/completions '{"prompt":"Hello","max_tokens":3}') $(code_of)"
! grep -q 'event=shutdown' "$LOG" || fail "the requests of the not-ready period outlasted --drain-delay 15"
[ "$ready" = "503 shutting_down" ] || fail "/health/ready in the not-ready period: $ready"
[ "$health" = "503 shutting_down" ] || fail "/health in the not-ready period: $health"
[ "$live" = "200 ok" ] || fail "/health/live in the not-ready period: $live"
[ "$gen" = "200 text_completion" ] || fail "a completion in the not-ready period: $gen"
wait_until "STOPPING=1 on SIGTERM" grep -q 'STOPPING=1' "$work/notify.txt"
wait_until "the drain after the delay" grep -q 'event=shutdown reason=SIGTERM' "$LOG"
serve_stop none
[ "$STATUS" = 0 ] || fail "exit status $STATUS after the not-ready period and the drain"
wait "$LISTENER" || true

SERVE_DRAIN_DELAY=default serve_start --config "$work/delay.conf"
kill -INT "$PID"
wait_until "the drain on SIGINT" grep -q 'event=shutdown reason=SIGINT' "$LOG"
grep -q 'event=not_ready' "$LOG" && fail "SIGINT waited for the drain delay"
serve_stop none
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGINT"
echo "serve_health: all checks passed"
rm -rf "$work"
