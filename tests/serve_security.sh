#!/bin/sh
# Security defaults of `qwen3d serve`, black-box on the tiny model:
#  - without --host it listens on 127.0.0.1 only (the kernel's socket table);
#  - prompt text never reaches the log without --log-prompts: a marker sent
#    in prompts, messages, stop strings, the model name and malformed or
#    refused bodies never shows up; with --log-prompts it does (so the
#    check can see it);
#  - a request naming a file (as its model) gets a 404 and nothing else;
#  - bearer keys: only the exact key passes (not a prefix, not a longer
#    one, not another scheme); /health and /metrics need none.
NAME=serve_security
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model

# The default address: started without --host (serve_start passes one).
LOG="$work/default-host.log"
"$QWEN3D" serve --model "$MODEL" --port 0 --threads 2 --drain-delay 0 >"$work/serve.out" 2>"$LOG" &
PID=$!
SERVE_PIDS="$SERVE_PIDS $PID"
i=0
while ! grep -q "event=model_loaded" "$LOG" 2>/dev/null; do
  alive "$PID" || fail "the daemon exited while starting"
  i=$((i + 1))
  [ $i -lt 300 ] || fail "the daemon did not load the model within 30 s"
  sleep 0.1
done
PORT=$(sed -n 's/.*event=listening host=\([^ ]*\) port=\([0-9]*\).*/\2/p' "$LOG")
grep -q "event=listening host=127.0.0.1 " "$LOG" || fail "the default host is not 127.0.0.1: $(grep event=listening "$LOG")"
hex=$(printf '%04X' "$PORT")
# Listening sockets (state 0A) on this port: exactly one, bound to 127.0.0.1.
binds=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $2 }')
[ "$binds" = "0100007F:$hex" ] || fail "the daemon listens on '$binds', not on 127.0.0.1 only"
BASE="http://127.0.0.1:$PORT"

# Prompt text stays out of the log.
M=qdmarker7f3a9c
ok() { [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(cat "$work/body")"; }
ok "$(http POST /v1/completions "{\"prompt\":\"say $M please\",\"max_tokens\":3}")" 200 "completion"
ok "$(http POST /v1/completions "{\"prompt\":\"say $M please\",\"max_tokens\":3,\"stream\":true,\"stop\":[\"$M\"]}")" 200 \
  "streamed completion"
ok "$(http POST /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":\"$M\"},{\"role\":\"user\",\"content\":\"hi $M\"}],\"max_tokens\":3}")" \
  200 "chat"
ok "$(http POST /v1/chat/completions "{\"messages\":[{\"role\":\"$M\",\"content\":\"$M\"}]}")" 400 "chat with a bad role"
ok "$(http POST /v1/completions "{\"prompt\":\"$M\",\"model\":\"$M\"}")" 404 "unknown model"
ok "$(http POST /v1/completions "{\"prompt\":\"$M\", nope")" 400 "malformed JSON"
ok "$(http POST /v1/completions "{\"prompt\":\"$M\",\"temperature\":\"$M\"}")" 400 "a mistyped field"
ok "$(http POST /v1/completions "{\"prompt\":[\"$M\",\"$M\"]}")" 400 "two prompts"
ok "$(http POST /v1/completions "{\"prompt\":\"$M\"}" -H "X-Note: $M")" 200 "a header"
# A field that names a file is only ever a name.
ok "$(http POST /v1/completions '{"prompt":"hi","model":"/etc/passwd"}')" 404 "a model named by path"
[ "$(json "$work/body" 'j.error.code')" = model_not_found ] || fail "model path body: $(cat "$work/body")"
grep -q 'root:' "$work/body" && fail "a file's content came back"
ok "$(http POST /v1/completions '{"prompt":"hi","model":"../../../../etc/passwd"}')" 404 "a model named by a relative path"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
grep -q "$M" "$LOG" && fail "prompt text reached the log without --log-prompts: $(grep "$M" "$LOG" | head -n 3)"

serve_start --log-prompts
ok "$(http POST /v1/completions "{\"prompt\":\"say $M please\",\"max_tokens\":3}")" 200 "completion with --log-prompts"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
grep -q "event=prompt_text .*$M" "$LOG" || fail "--log-prompts did not log the prompt"

# Bearer keys.
printf 'k3y-Secret-value\n' >"$work/key"
serve_start --api-key-file "$work/key"
ok "$(http GET /v1/models - -H 'Authorization: Bearer k3y-Secret-value')" 200 "the right key"
ok "$(http GET /v1/models - -H 'Authorization: bearer k3y-Secret-value')" 200 "the scheme in lower case"
ok "$(http GET /v1/models - -H 'Authorization: Bearer k3y-Secret-valu')" 401 "a prefix of the key"
ok "$(http GET /v1/models - -H 'Authorization: Bearer k3y-Secret-value2')" 401 "the key and more"
ok "$(http GET /v1/models - -H 'Authorization: Bearer K3Y-SECRET-VALUE')" 401 "the key in another case"
ok "$(http GET /v1/models - -H 'Authorization: Basic k3y-Secret-value')" 401 "another scheme"
ok "$(http GET /v1/models - -H 'Authorization: Bearer ')" 401 "an empty key"
ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}')" 401 "a completion without a key"
ok "$(http GET /health)" 200 "/health without a key"
ok "$(http GET /metrics)" 200 "/metrics without a key"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
grep -q 'k3y-Secret-value' "$LOG" && fail "the API key reached the log"
echo "serve_security: all checks passed"
rm -rf "$work"
