#!/bin/sh
# Browser access (CORS) and request ids of `qwen3d serve`, black-box on the
# tiny model:
#  - --cors-origin values are checked at start (a path, another scheme,
#    an empty entry: exit 2 naming the entry);
#  - with `--cors-origin A`, over HTTP (curl): a preflight from A gets 204
#    with the allowed methods and headers, one from another origin 403 with
#    the API's error body and no CORS header, a plain OPTIONS 204 with
#    Allow; answers to A (JSON, stream, error) carry
#    Access-Control-Allow-Origin and Vary: Origin, others' do not;
#  - in headless Chromium (tests/cors/cors-checks.js), pages served from
#    two other loopback origins (tests/cors/pages.js): the page from A
#    reads completions, a stream, an error and the exposed X-Request-Id
#    through fetch; the page from the other origin gets fetch's TypeError;
#    without --cors-origin, the page from A is refused too;
#  - X-Request-Id: a valid one is echoed and logged, a malformed or too
#    long one is replaced by the generated id (logged as replaced), and a
#    request without one gets the generated id.
# Chromium is the Debian package (deploy/install-deps.sh --test installs it).
NAME=serve_cors
. "$QD_SRCDIR/tests/serve/common.sh"

CHROMIUM=${QD_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || skip "$CHROMIUM is missing (apt-get install chromium, or deploy/install-deps.sh --test)"
export QD_CHROMIUM="$CHROMIUM"
serve_model
ok() { [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(head -c 300 "$work/body")"; }
header() { sed -n "s/^$1: *//Ip" "$work/headers" | tr -d '\r' | head -n 1; }

# Bad lists are refused before anything starts.
for bad in 'http://a.test/path' 'ftp://a.test' 'http://a.test,' 'a.test' 'http://a.test:123456' 'http://'; do
  st=0
  "$QWEN3D" serve --model "$MODEL" --port 0 --cors-origin "$bad" >/dev/null 2>"$work/bad.err" || st=$?
  [ "$st" = 2 ] || fail "--cors-origin '$bad': exit $st, expected 2"
  grep -q -- "--cors-origin" "$work/bad.err" || fail "--cors-origin '$bad': $(cat "$work/bad.err")"
done

# The pages' two origins.
"$NODE" "$QD_SRCDIR/tests/cors/pages.js" >"$work/pages.txt" &
EXTRA_PIDS="$EXTRA_PIDS $!"
wait_until "the page servers" grep -q ' ' "$work/pages.txt"
A="http://127.0.0.1:$(cut -d' ' -f1 "$work/pages.txt")"
B="http://127.0.0.1:$(cut -d' ' -f2 "$work/pages.txt")"

serve_start --cors-origin "https://elsewhere.example, $A"
pre() { http OPTIONS "$1" - -H "Origin: $2" -H 'Access-Control-Request-Method: POST' \
  -H 'Access-Control-Request-Headers: content-type, authorization, x-request-id'; }
ok "$(pre /v1/chat/completions "$A")" 204 "preflight from $A"
[ "$(header Access-Control-Allow-Origin)" = "$A" ] || fail "preflight: Allow-Origin '$(header Access-Control-Allow-Origin)'"
[ "$(header Access-Control-Allow-Methods)" = "GET, POST, OPTIONS" ] || fail "preflight: Allow-Methods"
[ "$(header Access-Control-Allow-Headers)" = "Authorization, Content-Type, X-Request-Id" ] || fail "preflight: Allow-Headers"
[ -n "$(header Access-Control-Max-Age)" ] || fail "preflight: no Max-Age"
[ "$(header Vary)" = Origin ] || fail "preflight: Vary '$(header Vary)'"
ok "$(pre /v1/chat/completions "$B")" 403 "preflight from $B"
[ "$(json "$work/body" 'j.error.code')" = cors_origin_not_allowed ] || fail "the 403's body: $(cat "$work/body")"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "the 403 allows an origin"
ok "$(pre /v1/nothing "$A")" 404 "preflight to an unknown path"
ok "$(http OPTIONS /v1/models)" 204 "OPTIONS without an Origin"
[ "$(header Allow)" = "GET, HEAD, OPTIONS" ] || fail "OPTIONS /v1/models: Allow '$(header Allow)'"
ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}' -H "Origin: $A")" 200 "a completion from $A"
[ "$(header Access-Control-Allow-Origin)" = "$A" ] || fail "completion: Allow-Origin '$(header Access-Control-Allow-Origin)'"
[ "$(header Access-Control-Expose-Headers)" = X-Request-Id ] || fail "completion: X-Request-Id not exposed"
ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2,"stream":true}' -H "Origin: $A")" 200 "a stream from $A"
[ "$(header Access-Control-Allow-Origin)" = "$A" ] || fail "stream: Allow-Origin '$(header Access-Control-Allow-Origin)'"
tail -n 1 "$work/body" | grep -q '^data: \[DONE\]' || tail -n 2 "$work/body" | grep -q '\[DONE\]' || fail "stream: no [DONE]"
ok "$(http POST /v1/completions '{"prompt":"hi","top_p":7}' -H "Origin: $A")" 400 "an error for $A"
[ "$(header Access-Control-Allow-Origin)" = "$A" ] || fail "error: Allow-Origin '$(header Access-Control-Allow-Origin)'"
ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}' -H "Origin: $B")" 200 "a completion from $B"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "$B was allowed"

"$NODE" "$QD_SRCDIR/tests/cors/cors-checks.js" "$BASE" "$A" "$B" || fail "the browser checks failed"
# The browser's refused preflight reached the daemon and was answered 403.
wait_until "the refused preflight's log line" grep -q 'event=request .*method=OPTIONS path=/v1/completions status=403' "$LOG"

# X-Request-Id.
ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}' -H 'X-Request-Id: trace:4bf92f35.77-a_b')" 200 "a client id"
[ "$(header X-Request-Id)" = "trace:4bf92f35.77-a_b" ] || fail "X-Request-Id '$(header X-Request-Id)' not echoed"
cmpl=$(json "$work/body" 'j.id')
wait_until "the client id in the log" grep -q "event=request id=$cmpl request_id=trace:4bf92f35.77-a_b " "$LOG"
long=$(printf '%0129d' 0)
for bad in 'has space' 'semi;colon' "$long" 'quote"d'; do
  ok "$(http GET /v1/models - -H "X-Request-Id: $bad")" 200 "X-Request-Id '$bad'"
  got=$(header X-Request-Id)
  case $got in req-[0-9a-f]*) ;; *) fail "X-Request-Id '$bad' came back as '$got', not replaced" ;; esac
  wait_until "the replacement of '$bad' logged" grep -q "event=request_id_replaced id=$got " "$LOG"
done
ok "$(http GET /v1/models - -H "X-Request-Id: $(printf '%0128d' 0)")" 200 "a 128-character id"
[ "$(header X-Request-Id)" = "$(printf '%0128d' 0)" ] || fail "a 128-character id was not kept"
ok "$(http POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}')" 200 "no client id"
[ "$(header X-Request-Id)" = "$(json "$work/body" 'j.id')" ] || fail "without a client id, X-Request-Id is not the response id"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# Nothing is allowed by default.
serve_start
ok "$(pre /v1/completions "$A")" 403 "preflight from $A without --cors-origin"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "an origin allowed by default"
"$NODE" "$QD_SRCDIR/tests/cors/cors-checks.js" "$BASE" - "$A" || fail "the browser checks without --cors-origin failed"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
echo "serve_cors: all checks passed"
rm -rf "$work"
