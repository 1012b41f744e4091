#!/bin/sh
# The limits that protect the host, black-box on the tiny model, each set
# by its option:
#  - --max-header-bytes: headers over it get 431 (with the API's error body;
#    far larger ones get libmicrohttpd's own 431), the daemon serves on;
#  - --idle-timeout: a connection that stops sending is closed in time;
#  - --max-connections: a connection beyond the limit is not served while
#    the others stay open, and is once they close, by the idle timeout or by
#    the client (the server must resume accepting);
#  - --max-tokens: a larger max_tokens is a 400, a request without one
#    generates at most that many;
#  - --ctx: a prompt that leaves no room is a 400 context_length_exceeded;
#  - --kv-budget: a request whose KV cache cannot fit is a 503
#    kv_budget_exceeded; concurrent ones that fit one at a time all
#    complete, never more than one session at once;
#  - a prompt of megabytes is tokenized off the event loop: /health and a
#    short completion are answered while it is (tests/serve/big-prompt.js),
#    and it still gets its 400 context_length_exceeded;
#  - each daemon exits 0 on SIGTERM (with --enable-sanitizers: no leak).
NAME=serve_limits
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start --parallel 2 --ctx 512 --max-header-bytes 2048 --max-connections 3 --idle-timeout 2 --max-tokens 64

pad() { head -c "$1" /dev/zero | tr '\0' a; }
[ "$(http GET /health - -H "X-Pad: $(pad 1500)")" = 200 ] || fail "headers under --max-header-bytes were refused"
[ "$(http GET /health - -H "X-Pad: $(pad 2500)")" = 431 ] || fail "headers over --max-header-bytes: not a 431"
[ "$(json "$work/body" 'j.error.code')" = request_header_too_large ] || fail "431 body: $(cat "$work/body")"
[ "$(http POST /v1/completions '{"prompt":"hi"}' -H "X-Pad: $(pad 2500)")" = 431 ] ||
  fail "a POST with headers over --max-header-bytes: not a 431"
[ "$(http GET /health - -H "X-Pad: $(pad 60000)")" = 431 ] || fail "headers far over the limit: not a 431"
[ "$(http GET /health)" = 200 ] || fail "/health after oversized headers"

"$NODE" "$scripts/limits-client.js" idle "$PORT" 1 6 || fail "--idle-timeout"
"$NODE" "$scripts/limits-client.js" conn-limit "$PORT" 3 || fail "--max-connections"
[ "$(http GET /health)" = 200 ] || fail "/health after the connection limit was reached"

ids='[1,2,3,4,5,6,7,8]'
[ "$(http POST /v1/completions "{\"prompt\":$ids,\"max_tokens\":65}")" = 400 ] || fail "max_tokens over --max-tokens"
[ "$(json "$work/body" 'j.error.param')" = max_tokens ] || fail "max_tokens 400 body: $(cat "$work/body")"
[ "$(http POST /v1/completions "{\"prompt\":$ids,\"max_tokens\":64}")" = 200 ] || fail "max_tokens at --max-tokens"
[ "$(http POST /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story."}],"temperature":0}')" = 200 ] ||
  fail "chat without max_tokens: $(cat "$work/body")"
[ "$(json "$work/body" 'j.usage.completion_tokens <= 64')" = true ] || fail "the default max_tokens passed --max-tokens"
long=$(seq -s, 1 600)
[ "$(http POST /v1/completions "{\"prompt\":[$long],\"max_tokens\":1}")" = 400 ] || fail "a prompt longer than --ctx"
[ "$(json "$work/body" 'j.error.code')" = context_length_exceeded ] || fail "--ctx 400 body: $(cat "$work/body")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# The KV budget: a session of 64 tokens reserves 64/512 of a whole-context
# session (the daemon logs that size); the budget holds one such session
# and not two.
serve_start --parallel 3 --ctx 512
full=$(sed -n 's/.*event=model_loaded .*kv_bytes_full_ctx=\([0-9]*\).*/\1/p' "$LOG")
[ -n "$full" ] || fail "no kv_bytes_full_ctx in the model_loaded line"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
budget=$((full / 8 + full / 64))
serve_start --parallel 3 --ctx 512 --kv-budget "$budget"
[ "$(http POST /v1/completions "{\"prompt\":$ids,\"max_tokens\":100}")" = 503 ] ||
  fail "a request whose KV cache exceeds --kv-budget: $(cat "$work/body")"
[ "$(json "$work/body" 'j.error.code')" = kv_budget_exceeded ] || fail "kv budget 503 body: $(cat "$work/body")"
pids=""
for i in 1 2 3; do
  curl -s -m 60 -o "$work/kv.$i" "$BASE/v1/completions" -d "{\"prompt\":$ids,\"max_tokens\":56,\"temperature\":0}" &
  pids="$pids $!"
done
EXTRA_PIDS="$pids"
most=0
while :; do
  n=$(metric qwen3d_sessions_active)
  [ "${n:-0}" -gt "$most" ] && most=$n
  running=0
  for p in $pids; do kill -0 "$p" 2>/dev/null && running=1; done
  [ $running = 1 ] || break
  sleep 0.05
done
for p in $pids; do wait "$p" || fail "a request under the KV budget failed"; done
for i in 1 2 3; do
  [ "$(json "$work/kv.$i" 'j.usage.completion_tokens')" = 56 ] || fail "request $i under the KV budget: $(cat "$work/kv.$i")"
done
[ "$most" -le 1 ] || fail "$most sessions ran at once within a KV budget for one"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# 3 MB of prompt (under the default --max-body) keeps the tokenizer busy for
# about a second here; the client compares every time with its own measure.
serve_start --ctx 512
"$NODE" "$scripts/big-prompt.js" "$PORT" 3000000 || fail "a large prompt's tokenization held up other requests"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
echo "serve_limits: all checks passed"
rm -rf "$work"
