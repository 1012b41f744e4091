#!/bin/sh
# `qwen3d serve` black-box, on the tiny model with the real Qwen3 tokenizer:
# every endpoint with curl (status, headers, bodies, raw SSE framing), then
# tests/serve/http-checks.js (streaming equals non-streaming, token-id
# prompts, stop strings, 4 concurrent streams with --parallel 2 equal their
# single runs, the documented errors, exact metric counters), the official
# `openai` npm client, client disconnects mid-stream and mid-request (the
# session is freed: sessions_active back to 0, no more tokens generated),
# a strict parse of a scrape (tests/serve_prom.sh runs promtool and a real
# Prometheus server), and TTFT timed from the request's arrival: it holds
# the tokenization the debug log reports.
NAME=serve_api
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
# The stall file holds the compute thread, so a request cut below is still
# generating when its client goes.
stall="$work/stall"
serve_start_hooks "$stall" --parallel 2 --ctx 512 --max-body 65536 --log-level debug

# /health, /v1/models, /metrics
[ "$(http GET /health)" = 200 ] || fail "/health: $(cat "$work/body")"
[ "$(cat "$work/body")" = '{"status":"ok"}' ] || fail "/health body: $(cat "$work/body")"
grep -qi '^content-type: application/json' "$work/headers" || fail "/health content type"
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' -I "$BASE/health")" = 200 ] || fail "HEAD /health"
[ "$(http GET /v1/models)" = 200 ] || fail "/v1/models"
[ "$(json "$work/body" 'j.data[0].id')" = tiny ] || fail "/v1/models does not name the model: $(cat "$work/body")"
[ "$(http GET /metrics)" = 200 ] || fail "/metrics"
grep -qi '^content-type: text/plain; version=0.0.4' "$work/headers" || fail "/metrics content type"
for m in requests_total prompt_tokens_total generation_tokens_total time_to_first_token_seconds \
  inter_token_latency_seconds request_duration_seconds queue_wait_seconds prefill_seconds sessions_active requests_waiting \
  kv_cache_bytes model_weight_bytes model_load_seconds build_info; do
  grep -q "^# TYPE qwen3d_$m " "$work/body" || fail "/metrics lacks qwen3d_$m"
done
for m in process_resident_memory_bytes process_cpu_seconds_total process_start_time_seconds; do
  grep -q "^$m " "$work/body" || fail "/metrics lacks $m"
done

# Errors that are about HTTP rather than JSON: unknown path, wrong method, body too large.
[ "$(http GET /v2/nothing)" = 404 ] || fail "unknown path is not a 404"
[ "$(json "$work/body" 'j.error.code')" = not_found ] || fail "404 body: $(cat "$work/body")"
[ "$(http DELETE /v1/models)" = 405 ] || fail "DELETE /v1/models is not a 405"
grep -qi '^allow: GET, HEAD' "$work/headers" || fail "405 without Allow"
[ "$(json "$work/body" 'j.error.type')" = invalid_request_error ] || fail "405 body: $(cat "$work/body")"
[ "$(http GET /v1/completions)" = 405 ] || fail "GET /v1/completions is not a 405"
head -c 100000 /dev/zero | tr '\0' a >"$work/big"
[ "$(http POST /v1/completions @"$work/big")" = 413 ] || fail "a body over --max-body is not a 413"
[ "$(json "$work/body" 'j.error.code')" = request_too_large ] || fail "413 body: $(cat "$work/body")"
[ "$(http POST /v1/completions @"$work/big" -H 'Transfer-Encoding: chunked')" = 413 ] ||
  fail "a chunked body over --max-body is not a 413"

# Raw SSE framing.
code=$(curl -s -m 30 -N -o "$work/sse" -D "$work/headers" -w '%{http_code}' "$BASE/v1/completions" \
  -d '{"prompt":"Hello world","max_tokens":6,"temperature":0,"stream":true}')
[ "$code" = 200 ] || fail "streaming completion: $code"
grep -qi '^content-type: text/event-stream' "$work/headers" || fail "stream content type"
grep -v '^$' "$work/sse" | grep -qv '^data: ' && fail "a stream line is not a data line: $(cat "$work/sse")"
[ "$(grep -v '^$' "$work/sse" | tail -n 1)" = "data: [DONE]" ] || fail "the stream does not end with [DONE]"
grep -q '"finish_reason":"length"' "$work/sse" || fail "no final chunk with finish_reason"

# TTFT is timed from the request's arrival: it holds the prompt's
# tokenization (the daemon's debug log times it), the queue wait and the
# prefill, each measured by the daemon on one clock, so this is no race.
# Three decimals each: 0.002 ms of rounding.
words=$(seq 1 100 | sed 's/.*/word&/' | tr '\n' ' ')
code=$(curl -s -m 30 -o "$work/big.json" -D "$work/headers" -w '%{http_code}' "$BASE/v1/chat/completions" \
  -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$words\"}],\"max_tokens\":2,\"temperature\":0}")
[ "$code" = 200 ] || fail "a long chat prompt: $code $(cat "$work/big.json")"
id=$(sed -n 's/^[Xx]-[Rr]equest-[Ii]d: \([^[:space:]]*\).*/\1/p' "$work/headers")
tok=$(sed -n "s/.*event=job_submitted id=$id .*tokenize_ms=\([0-9.]*\).*/\1/p" "$LOG")
[ -n "$tok" ] || fail "no job_submitted line with tokenize_ms for $id in the debug log"
[ "$(json "$work/big.json" "j.timings.ttft_ms + 0.002 >= $tok + j.timings.queue_ms + j.timings.prompt_ms")" = true ] ||
  fail "ttft_ms does not hold the tokenization ($tok ms) and the queue and prefill: $(cat "$work/big.json")"

# The JSON-level checks and the openai client.
ids=$(printf 'Hello world' | "$QWEN3D" tokenize --json --model "$MODEL" | sed 's/.*"ids":\(\[[^]]*\]\).*/\1/')
"$NODE" "$scripts/http-checks.js" "$BASE" tiny "$ids" "$stall" || fail "http-checks.js"
"$NODE" "$scripts/openai-client.js" "$BASE" tiny || fail "openai-client.js"

# Client disconnects: a stream and a non-streaming request, each cut while it
# generates, free their session (and its KV cache), and generation stops.
# The steps are held after the prefill and a few tokens (the stall file lets
# 8 through), the client is cut, then the steps go on.
for stream in true false; do
  echo 8 >"$stall"
  curl -s -N -o /dev/null "$BASE/v1/completions" \
    -d "{\"prompt\":\"Tell me a long story.\",\"max_tokens\":480,\"stream\":$stream}" &
  CURL=$!
  EXTRA_PIDS="$CURL"
  i=0
  while [ "$(metric qwen3d_sessions_active)" != 1 ]; do
    i=$((i + 1))
    [ $i -lt 50 ] || fail "the long request did not get a session (stream=$stream)"
    sleep 0.1
  done
  [ "$(metric qwen3d_kv_cache_bytes)" -gt 0 ] || fail "kv_cache_bytes is 0 while a session generates"
  sleep 0.2
  kill "$CURL"
  wait "$CURL" 2>/dev/null && fail "the request was not cut"
  rm -f "$stall"
  i=0
  while [ "$(metric qwen3d_sessions_active)" != 0 ]; do
    i=$((i + 1))
    [ $i -lt 50 ] || fail "sessions_active is not 0 five seconds after the client disconnected (stream=$stream)"
    sleep 0.1
  done
  g1=$(metric qwen3d_generation_tokens_total)
  sleep 0.3
  [ "$(metric qwen3d_generation_tokens_total)" = "$g1" ] || fail "tokens are still generated after the disconnect"
done
[ "$(grep -c 'event=request .*finish=cancelled' "$LOG")" = 2 ] || fail "the log does not show 2 cancelled requests"
grep -q 'path=/v1/completions status=499 completed=0' "$LOG" || fail "no 499 for the cut non-streaming request"

curl -s -m 10 "$BASE/metrics" >"$work/metrics.txt"
"$NODE" -e 'require(process.argv[1]).parseMetrics(require("fs").readFileSync(process.argv[2], "utf8"))' \
  "$scripts/metrics-parse.js" "$work/metrics.txt" || fail "/metrics does not parse"

grep -q ' prompt_text\| completion_text' "$LOG" && fail "prompt text was logged without --log-prompts"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM"
echo "serve_api: all checks passed"
rm -rf "$work"
