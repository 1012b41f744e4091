#!/bin/sh
# A body over --max-body is answered 413 while the client is still sending
# it, then the rest is read and dropped for a bounded time and amount (a
# lingering close, --linger-time and --linger-bytes), black-box on the tiny
# model:
#  - Node's fetch (undici, which the openai client uses; it used to get
#    "fetch failed", the connection reset under it), with a body of known
#    length and a chunked one, the openai client, and curl with and without
#    "Expect: 100-continue" all get the 413 and the API's error object;
#  - a raw socket that never stops sending gets the 413, and is cut once
#    --linger-time has passed (sending slowly) or once --linger-bytes have
#    been read (sending fast): with --max-connections 1, another request is
#    served after that, so the bound is also the time the socket holds a
#    connection slot;
#  - each daemon exits 0 on SIGTERM (with --enable-sanitizers: no leak).
NAME=serve_linger
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
big=$((20 * 1024 * 1024))
serve_start --max-body 65536
"$NODE" "$scripts/linger-client.js" clients "$BASE" tiny "$big" || fail "clients sending $big bytes"
head -c "$big" /dev/zero | tr '\0' a >"$work/big"
for expect in "Expect: 100-continue" "Expect:"; do
  code=$(curl -s -m 60 -o "$work/body" -w '%{http_code}' -H 'Content-Type: application/json' -H "$expect" \
    --data-binary @"$work/big" "$BASE/v1/completions") || true
  [ "$code" = 413 ] || fail "curl ($expect) sending $big bytes: status $code"
  [ "$(json "$work/body" 'j.error.code')" = request_too_large ] || fail "curl ($expect) 413 body: $(cat "$work/body")"
done
[ "$(http GET /health)" = 200 ] || fail "/health after the 413s"
# Each is counted once its lingering close has ended (the client closing).
i=0
while :; do
  n=$(curl -s -m 10 "$BASE/metrics" | sed -n 's/^qwen3d_requests_total{model_name="[^"]*",endpoint="\/v1\/completions",code="413"} //p')
  [ "$n" = 5 ] && break
  i=$((i + 1))
  [ $i -lt 100 ] || fail "qwen3d_requests_total counts ${n:-no} 413s, the clients got 5"
  sleep 0.1
done
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# flood BOUND SPEED FRAMING ROUNDS OPTIONS...: a raw sender that never
# stops, on a daemon with --max-connections 1, is cut by the lingering
# close's BOUND (time or bytes), and another request is served after that;
# ROUNDS times. The cut must reset the connection even when the client is
# stalled on a zero window (which only some rounds happen to reach).
flood() {
  bound=$1 speed=$2 framing=$3 rounds=$4
  shift 4
  serve_start --max-body 65536 --max-connections 1 "$@"
  round=1
  while [ $round -le "$rounds" ]; do
    "$NODE" "$scripts/linger-client.js" flood "$PORT" "$speed" "$framing" 60 ||
      fail "a $speed sender that never stops (round $round)"
    [ "$(http GET /health)" = 200 ] || fail "no request served after the $speed sender was cut (--max-connections 1)"
    round=$((round + 1))
  done
  n=$(grep -c "event=linger_end reason=$bound answered=1" "$LOG")
  [ "$n" = "$rounds" ] || fail "$n of $rounds lingering closes ended on --linger-$bound"
  serve_stop
  [ "$STATUS" = 0 ] || fail "exit status $STATUS"
}
# A slow sender, with a byte bound it never reaches.
flood time slow length 1 --linger-time 2 --linger-bytes 1073741824
# A fast sender of a chunked body without end (refused in the middle of the
# body), with a time bound it never reaches.
flood bytes fast chunked 20 --linger-time 600 --linger-bytes 4194304
echo "serve_linger: all checks passed"
rm -rf "$work"
