#!/bin/sh
# `qwen3d serve` operations, black-box on the tiny model:
#  - strict options: bad values, unknown options and config keys are one
#    line on stderr and exit status 2;
#  - while the model loads /health and generations answer 503 (the
#    tokenizer file is a FIFO the test fills when it chooses), READY=1 is
#    sent over NOTIFY_SOCKET only after loading, WATCHDOG=1 at half of
#    WATCHDOG_USEC, STOPPING=1 on SIGTERM;
#  - SIGTERM drains: a stream in flight runs to its end, new connections are
#    refused, exit status 0; with --drain-timeout 1 a long stream is ended
#    with a final error event and [DONE], and the daemon exits 0 in time;
#  - --config file, bearer-token auth (curl and the openai client), a full
#    queue answers 503 with Retry-After;
#  - --request-timeout ends a long generation with finish_reason "length";
#    a port in use, a missing or empty model folder fail with one message;
#  - deploy/qwen3d.service passes `systemd-analyze verify` (when present).
NAME=serve_ops
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model

# ---- options ------------------------------------------------------------------
expect_usage_error() { # WHAT PATTERN ARGS...
  what=$1 pat=$2
  shift 2
  st=0
  "$QWEN3D" serve "$@" >"$work/out" 2>"$work/err" </dev/null || st=$?
  [ "$st" = 2 ] || fail "$what: exit status $st, expected 2"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$what: expected one line on stderr, got: $(cat "$work/err")"
  grep -q -- "$pat" "$work/err" || fail "$what: error does not mention '$pat': $(cat "$work/err")"
}
expect_usage_error "no --model" "--model" --port 0
expect_usage_error "port out of range" "--port" --model "$MODEL" --port 70000
expect_usage_error "port not a number" "--port" --model "$MODEL" --port 80x
expect_usage_error "parallel 0" "--parallel" --model "$MODEL" --parallel 0
expect_usage_error "unknown option" "--frobnicate" --model "$MODEL" --frobnicate
expect_usage_error "missing value" "--threads" --model "$MODEL" --threads
expect_usage_error "missing config" "nowhere.conf" --config "$work/nowhere.conf"
printf 'model = %s\nparalel = 2\n' "$MODEL" >"$work/typo.conf"
expect_usage_error "unknown config key" "typo.conf:2" --config "$work/typo.conf"
printf 'model = %s\nqueue = lots\n' "$MODEL" >"$work/bad.conf"
expect_usage_error "bad config value" "bad.conf:2: queue" --config "$work/bad.conf"
printf 'model = %s\nkv-mode = sideways\n' "$MODEL" >"$work/bad-engine.conf"
expect_usage_error "bad engine option in a config" "--kv-mode" --config "$work/bad-engine.conf"
expect_usage_error "bad engine option" "--kv-type" --model "$MODEL" --kv-type f8
expect_usage_error "bad sampling defaults" "--sampling-defaults must be model or openai" --model "$MODEL" \
  --sampling-defaults vllm
expect_usage_error "negative kv budget" "--kv-budget" --model "$MODEL" --kv-budget -1
# The shipped example parses (only its model folder is missing here).
expect_usage_error "the example config" "--model '$work/no-model'" \
  --config "$QD_SRCDIR/deploy/qwen3d.conf.example" --model "$work/no-model"
"$QWEN3D" serve --help >"$work/help" || fail "serve --help failed"
grep -q -- "--api-key-file" "$work/help" || fail "serve --help does not list --api-key-file"

# ---- loading, sd_notify, drain ----------------------------------------------
notify_listen 60
slow_model
NOTIFY_SOCKET="$NOTIFY_SOCK" WATCHDOG_USEC=200000 SERVE_NO_WAIT=1 SERVE_MODEL="$SLOW_MODEL" serve_start
# The tokenizer is not there yet: the model is "loading".
[ "$(http GET /health)" = 503 ] || fail "/health while loading: $(cat "$work/body")"
[ "$(json "$work/body" 'j.error.code')" = model_loading ] || fail "/health body while loading: $(cat "$work/body")"
[ "$(http POST /v1/completions '{"prompt":"hi"}')" = 503 ] || fail "a completion while loading is not a 503"
grep -qi '^retry-after: ' "$work/headers" || fail "503 while loading without Retry-After"
grep -q 'READY=1' "$work/notify.txt" && fail "READY=1 was sent before the model loaded"
release_model
[ "$(http GET /health)" = 200 ] || fail "/health after loading"
i=0
while [ "$(grep -c 'WATCHDOG=1' "$work/notify.txt")" -lt 2 ]; do
  i=$((i + 1))
  [ $i -lt 50 ] || fail "fewer than 2 WATCHDOG=1 within 5 s at WATCHDOG_USEC=200000: $(cat "$work/notify.txt")"
  sleep 0.1
done
grep -q '^READY=1|STATUS=serving' "$work/notify.txt" || fail "no READY=1 with STATUS: $(cat "$work/notify.txt")"

# SIGTERM with a stream in flight: the stream completes, the daemon exits 0.
curl -s -m 30 -N -o "$work/drain.sse" "$BASE/v1/completions" \
  -d '{"prompt":"Hello","max_tokens":150,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' &
CURL=$!
i=0
while [ ! -s "$work/drain.sse" ]; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "the stream did not start"
  sleep 0.05
done
kill -TERM "$PID"
sleep 0.2
curl -s -m 2 -o /dev/null "$BASE/health" && fail "a new connection was accepted while draining"
wait "$CURL" || fail "the stream in flight failed during the drain"
serve_stop none
[ "$STATUS" = 0 ] || fail "exit status $STATUS after a drain"
[ "$(tail -n 2 "$work/drain.sse" | head -n 1)" = "data: [DONE]" ] || fail "the drained stream did not end with [DONE]"
grep -q '"completion_tokens":150' "$work/drain.sse" || fail "the drained stream was cut short"
wait "$LISTENER" || true
grep -q 'STOPPING=1' "$work/notify.txt" || fail "no STOPPING=1: $(cat "$work/notify.txt")"
rm -rf "$sock_dir"

# ---- config file, auth, queue, drain timeout ------------------------------------
printf '  s3cret-key-42  \n' >"$work/api-key"
cat >"$work/qwen3d.conf" <<CONF
# a comment, then options as in deploy/qwen3d.conf.example
model = $MODEL
parallel = 1
queue = 0
api-key-file = $work/api-key
drain-timeout = 1
kv-mode = tensor
matmul-fp32 = false
CONF
serve_start --config "$work/qwen3d.conf"
grep -q 'parallel=1 queue=0 auth=bearer kv_mode=tensor' "$LOG" ||
  fail "the config file was not applied: $(grep event=listening "$LOG")"
[ "$(http GET /v1/models)" = 401 ] || fail "/v1/models without a key"
grep -qi '^www-authenticate: Bearer' "$work/headers" || fail "401 without WWW-Authenticate"
[ "$(json "$work/body" 'j.error.type')" = authentication_error ] || fail "401 body: $(cat "$work/body")"
[ "$(http GET /v1/models - -H 'Authorization: Bearer s3cret-key-4')" = 401 ] || fail "a wrong key was accepted"
[ "$(http GET /v1/models - -H 'Authorization: Bearer s3cret-key-42')" = 200 ] || fail "the right key was refused"
[ "$(http GET /health)" = 200 ] || fail "/health must not need the key"
"$NODE" "$scripts/openai-client.js" "$BASE" tiny auth s3cret-key-42 || fail "openai-client.js auth"

# One session, no queue: a second request while one runs is a 503 with Retry-After.
# The long generations here are greedy: sampled, they could draw an end token
# and finish before the event they are there to be cut by.
curl -s -m 30 -N -o "$work/long.sse" -H 'Authorization: Bearer s3cret-key-42' "$BASE/v1/completions" \
  -d '{"prompt":"Hello","max_tokens":4000,"temperature":0,"stream":true}' &
CURL=$!
i=0
while [ ! -s "$work/long.sse" ]; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "the long stream did not start"
  sleep 0.05
done
[ "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}' -H 'Authorization: Bearer s3cret-key-42')" = 503 ] ||
  fail "a request beyond --parallel 1 --queue 0 was not refused: $(cat "$work/body")"
[ "$(json "$work/body" 'j.error.code')" = queue_full ] || fail "queue full body: $(cat "$work/body")"
grep -qi '^retry-after: ' "$work/headers" || fail "queue full without Retry-After"

# SIGTERM with --drain-timeout 1: the long stream gets a final error event and [DONE].
t0=$(date +%s)
serve_stop
t1=$(date +%s)
[ "$STATUS" = 0 ] || fail "exit status $STATUS after the drain timeout"
[ $((t1 - t0)) -le 8 ] || fail "the drain took $((t1 - t0)) s with --drain-timeout 1"
wait "$CURL" || true
grep -v '^$' "$work/long.sse" | tail -n 2 | head -n 1 | grep -q '"code":"shutting_down"' ||
  fail "the cut stream has no final shutdown event: $(tail -c 300 "$work/long.sse")"
[ "$(grep -v '^$' "$work/long.sse" | tail -n 1)" = "data: [DONE]" ] || fail "the cut stream did not end with [DONE]"

# ---- per-request deadline; failures to start --------------------------------
serve_start --request-timeout 1 --parallel 1
start=$(date +%s)
[ "$(http POST /v1/completions '{"prompt":"Hello","max_tokens":4000,"temperature":0}')" = 200 ] ||
  fail "a request past its deadline: $(cat "$work/body")"
[ $(($(date +%s) - start)) -le 6 ] || fail "the deadline of 1 s did not stop the generation"
[ "$(json "$work/body" 'j.choices[0].finish_reason')" = length ] || fail "deadline finish: $(cat "$work/body")"
[ "$(json "$work/body" 'j.usage.completion_tokens < 4000')" = true ] || fail "the deadline did not cut the text"
grep -q 'finish=deadline' "$LOG" || fail "the log does not show the deadline"
st=0
"$QWEN3D" serve --model "$MODEL" --port "$PORT" >"$work/out" 2>"$work/err" || st=$?
[ "$st" != 0 ] || fail "a second daemon on a port in use started"
grep -q "qwen3d: serve: cannot listen on 127.0.0.1 port $PORT" "$work/err" || fail "port in use: $(cat "$work/err")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
expect_usage_error "missing model folder" "nowhere" --model "$work/nowhere"
mkdir -p "$work/empty-model"
st=0
"$QWEN3D" serve --model "$work/empty-model" --port 0 >"$work/out" 2>"$work/err" </dev/null || st=$?
[ "$st" = 1 ] || fail "a folder without a model: exit status $st, expected 1"
grep -q "^qwen3d: serve: .*empty-model/model.onnx" "$work/err" || fail "a folder without a model: $(cat "$work/err")"

# ---- the systemd unit ---------------------------------------------------------
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$work/unit"
  sed "s|/usr/local/bin/qwen3d|$QWEN3D|" "$QD_SRCDIR/deploy/qwen3d.service" >"$work/unit/qwen3d.service"
  systemd-analyze verify "$work/unit/qwen3d.service" >"$work/verify.txt" 2>&1 ||
    fail "systemd-analyze verify: $(cat "$work/verify.txt")"
  [ ! -s "$work/verify.txt" ] || fail "systemd-analyze verify warns: $(cat "$work/verify.txt")"
  echo "systemd-analyze verify deploy/qwen3d.service: ok"
else
  echo "systemd-analyze not installed: skipping the unit check"
fi
echo "serve_ops: all checks passed"
rm -rf "$work"
