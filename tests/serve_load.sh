#!/bin/sh
# `qwen3d serve` under concurrent streaming load, black-box on the tiny model,
# with --parallel 4 and a queue large enough for every client:
#  - tests/serve/load-clients.js: 16 greedy streams at once (completions and
#    chat) each equal the same request streamed alone; 5 clients that
#    disconnect (4 mid-stream, 1 while queued) free their sessions:
#    sessions_active, requests_waiting and kv_cache_bytes return to 0 and
#    generation stops;
#  - tests/serve/drain-clients.js: SIGTERM while 4 streams are active; every
#    stream ends cleanly (its full completion, or the final shutting_down
#    error event, then [DONE]; no truncated event or body), and the daemon
#    exits 0 within its drain timeout.
NAME=serve_load
. "$QD_SRCDIR/tests/serve/common.sh"

DRAIN=2
serve_model
# The stall file holds the compute thread while a client leaves the queue
# and while the drain test's four streams start.
serve_start_hooks "$work/stall" --parallel 4 --queue 32 --ctx 4096 --drain-timeout $DRAIN

"$NODE" "$scripts/load-clients.js" "$BASE" tiny "$work/stall" || fail "load-clients.js"
[ "$(grep -c 'event=request .*finish=cancelled' "$LOG")" = 5 ] ||
  fail "the log does not show 5 cancelled requests: $(grep -c 'finish=cancelled' "$LOG")"

"$NODE" "$scripts/drain-clients.js" "$BASE" tiny "$PID" "$work/stall" >"$work/drain.out" || {
  cat "$work/drain.out"
  fail "drain-clients.js"
}
head -n 1 "$work/drain.out"
serve_stop none
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM with 4 active streams"
# The daemon exits once the drain timeout has ended the long generations and
# their final events are out. Timed by the daemon's own log (its shutdown
# and exit lines), not by when this script got to look: on a loaded machine
# the script may notice the exit seconds later.
ms=$("$NODE" -e 'const l = require("fs").readFileSync(process.argv[1], "utf8");
  const t = (e) => Date.parse(new RegExp(`ts=(\\S+) level=\\S+ event=${e} `).exec(l)[1]);
  console.log(t("exit") - t("shutdown"));' "$LOG") || fail "no shutdown and exit lines in the log"
[ "$ms" -le $((DRAIN * 1000 + 2500)) ] || fail "the daemon exited $ms ms after SIGTERM with --drain-timeout $DRAIN"
grep -q 'event=drain_timeout .*action=end_generations' "$LOG" || fail "the log does not show the drain timeout"
grep -q 'event=exit code=0' "$LOG" || fail "the log does not show a clean exit"
echo "serve_load: SIGTERM to exit in $ms ms (drain timeout $DRAIN s)"
echo "serve_load: all checks passed"
rm -rf "$work"
