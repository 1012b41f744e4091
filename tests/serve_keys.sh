#!/bin/sh
# API keys of `qwen3d serve --api-key-file`, black-box on the tiny model:
#  - key files that are wrong (a bad name, a name or key given twice, a
#    space in a key, no key) stop the start with exit 2 naming file:line;
#  - several keys, named and not: each one passes, others get 401; the
#    request log and request_finished_total carry the key's name (keyN for
#    an unnamed one), each key's token counters and request-level
#    histograms (latencies, lengths) count its own requests, and no key
#    ever reaches the log or /metrics;
#  - prefix-cache scoping: a prompt cached under one key is a hit for that
#    key again (cached_tokens > 0 in the request log) and a miss for another;
#  - SIGHUP under load (tests/serve/qwen3d-hooks holds every step while a
#    file exists, so the streams are open and unfinished across the
#    reload, with no timing involved): the key file is replaced, SIGHUP
#    reloads it, the old key gets 401 and the new one 200 while the streams
#    wait, and then every stream (tests/serve/reload-clients.js) completes
#    (request_finished_total: 4 length, and 1 cancelled for a client that
#    left while the steps were held);
#    a reload with a broken key file changes nothing; --log-prompts, a
#    reloadable option, takes effect through the --config file.
NAME=serve_keys
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
ok() { [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(head -c 300 "$work/body")"; }
auth() { echo "Authorization: Bearer $1"; }

# Wrong key files.
bad_file() {
  printf "$1" >"$work/bad-keys"
  st=0
  "$QWEN3D" serve --model "$MODEL" --port 0 --api-key-file "$work/bad-keys" >/dev/null 2>"$work/bad.err" || st=$?
  [ "$st" = 2 ] || fail "key file '$1': exit $st, expected 2"
  grep -q "$2" "$work/bad.err" || fail "key file '$1': '$(cat "$work/bad.err")' does not say '$2'"
  grep -q 'sEcret' "$work/bad.err" && fail "a key reached the error: $(cat "$work/bad.err")"
  return 0
}
bad_file 'a/b sEcret1\n' 'bad-keys:1: the name'
bad_file 'a sEcret1\na sEcret2\n' "bad-keys:2: the name 'a' is given twice"
bad_file 'a sEcret1\nb sEcret1\n' "bad-keys:2: the key of 'b' is given twice"
bad_file '# only a comment\n\n' 'holds no key'
bad_file 'a sEcret1 more\n' 'bad-keys:1: a key is'

# Several keys; names in logs and metrics.
KA=sk-Alice-0123456789 KB=sk-Bob-0123456789 KC=sk-Unnamed-0123456789
printf '# tenants\nalice %s\n\n  bob\t%s  \n%s\n' "$KA" "$KB" "$KC" >"$work/keys"
serve_start --api-key-file "$work/keys" --prefix-min-tokens 8
grep -q 'event=listening .*auth=bearer .* keys=3$' "$LOG" || fail "the listening line: $(grep event=listening "$LOG")"
for k in "$KA" "$KB" "$KC"; do
  ok "$(http GET /v1/models - -H "$(auth "$k")")" 200 "a key of the file"
done
ok "$(http GET /v1/models - -H "$(auth sk-Alice-012345678)")" 401 "a prefix of a key"
ok "$(http GET /v1/models - -H "$(auth "$KA$KB")")" 401 "two keys together"
ok "$(http GET /v1/models - -H "$(auth alice)")" 401 "a key's name"

# The same prompt under each key: prefix hits only within a key.
P='The daemon keeps the prompt rows of finished requests and gives them back to the next request with the same beginning, but only within one tenant.'
gen() { # gen KEY: one completion of $P; sets CACHED, the prompt tokens it reused, and adds its usage to KEYNAME's
  ok "$(http POST /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":2,\"temperature\":0}" -H "$(auth "$1")")" 200 "a completion"
  id=$(json "$work/body" 'j.id')
  usage=$(json "$work/body" 'j.usage.prompt_tokens + " " + j.usage.completion_tokens')
  wait_until "the log line of $id" grep -q "event=request id=$id " "$LOG"
  line=$(grep "event=request id=$id " "$LOG")
  CACHED=$(echo "$line" | sed -n 's/.* cached_tokens=\([0-9]*\) .*/\1/p')
  KEYNAME=$(echo "$line" | sed -n 's/.* key=\([^ ]*\) .*/\1/p')
  set -- $usage
  eval "PT_$KEYNAME=\$((\${PT_$KEYNAME:-0} + $1)) CT_$KEYNAME=\$((\${CT_$KEYNAME:-0} + $2))"
  eval "N_$KEYNAME=\$((\${N_$KEYNAME:-0} + 1))"
}
gen "$KA"; [ "$CACHED" = 0 ] || fail "alice's first request reused $CACHED tokens"
[ "$KEYNAME" = alice ] || fail "the log names alice's key '$KEYNAME'"
gen "$KB"; [ "$CACHED" = 0 ] || fail "bob reused $CACHED tokens of alice's prompt"
[ "$KEYNAME" = bob ] || fail "the log names bob's key '$KEYNAME'"
gen "$KC"; [ "$CACHED" = 0 ] || fail "the unnamed key reused $CACHED tokens of another key's prompt"
[ "$KEYNAME" = key3 ] || fail "the log names the unnamed key '$KEYNAME', not key3"
gen "$KA"; [ "$CACHED" -gt 0 ] || fail "alice's second request reused nothing of her first"
gen "$KC"; [ "$CACHED" -gt 0 ] || fail "the unnamed key's second request reused nothing"

curl -s -m 10 "$BASE/metrics" >"$work/metrics"
for l in 'key_name="alice"} 2' 'key_name="bob"} 1' 'key_name="key3"} 2'; do
  grep -q "^qwen3d_request_finished_total{model_name=\"tiny\",finished_reason=\"length\",$l\$" "$work/metrics" ||
    fail "no request_finished_total ... $l: $(grep finished_total "$work/metrics")"
done
# Each key's token counters hold its own requests' usage, and no series without a key exists.
for k in alice bob key3; do
  eval "pt=\$PT_$k ct=\$CT_$k"
  grep -q "^qwen3d_prompt_tokens_total{model_name=\"tiny\",key_name=\"$k\"} $pt\$" "$work/metrics" ||
    fail "prompt_tokens_total of $k is not $pt: $(grep '^qwen3d_prompt_tokens_total' "$work/metrics")"
  grep -q "^qwen3d_generation_tokens_total{model_name=\"tiny\",key_name=\"$k\"} $ct\$" "$work/metrics" ||
    fail "generation_tokens_total of $k is not $ct: $(grep '^qwen3d_generation_tokens_total' "$work/metrics")"
done
[ "$(grep -c '^qwen3d_\(prompt\|generation\)_tokens_total{' "$work/metrics")" = 6 ] ||
  fail "token series other than the 3 keys': $(grep '^qwen3d_[a-z]*_tokens_total{' "$work/metrics")"
# The request-level histograms, a set per key: each key's counts and sums are its own requests'.
hist() { # hist FAMILY_SUFFIX KEY WANT
  grep -q "^qwen3d_$1{model_name=\"tiny\",key_name=\"$2\"} $3\$" "$work/metrics" ||
    fail "qwen3d_$1 of $2 is not $3: $(grep "^qwen3d_$1{" "$work/metrics")"
}
for k in alice bob key3; do
  eval "n=\$N_$k pt=\$PT_$k ct=\$CT_$k"
  for f in request_duration_seconds queue_wait_seconds time_to_first_token_seconds prefill_seconds \
    request_prompt_tokens request_generation_tokens request_decode_seconds; do
    hist "${f}_count" "$k" "$n"
  done
  hist inter_token_latency_seconds_count "$k" $((ct - n))
  hist request_prompt_tokens_sum "$k" "$pt"
  hist request_generation_tokens_sum "$k" "$ct"
  grep -q "^qwen3d_time_to_first_token_seconds_bucket{model_name=\"tiny\",key_name=\"$k\",le=\"+Inf\"} $n\$" \
    "$work/metrics" || fail "the +Inf bucket of $k's TTFT: $(grep '^qwen3d_time_to_first_token_seconds_bucket' "$work/metrics")"
done
[ "$(grep -c '^qwen3d_\(time_to_first_token\|inter_token_latency\|request_duration\)_seconds_count{' "$work/metrics")" = 9 ] ||
  fail "latency series other than the 3 keys': $(grep '^qwen3d_[a-z_]*_seconds_count{' "$work/metrics")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
for k in "$KA" "$KB" "$KC"; do
  grep -q -- "$k" "$LOG" "$work/metrics" && fail "a key reached the log or /metrics"
done

# SIGHUP under load.
OLD=sk-Old-0123456789 NEW=sk-New-0123456789
printf 'ops %s\n' "$OLD" >"$work/keys"
printf 'log-prompts = false\n' >"$work/qwen3d.conf"
stall="$work/stall"
serve_start_hooks "$stall" --config "$work/qwen3d.conf" --api-key-file "$work/keys" --parallel 4
touch "$stall"
"$NODE" "$scripts/reload-clients.js" "$BASE" "$OLD" 4 12 >"$work/clients.txt" 2>&1 &
CLIENTS=$!
EXTRA_PIDS="$EXTRA_PIDS $CLIENTS"
wait_until "4 streams open" grep -q '^open$' "$work/clients.txt"
printf 'ops %s\n' "$NEW" >"$work/keys.next"
mv "$work/keys.next" "$work/keys"
printf 'log-prompts = true\n' >"$work/qwen3d.conf"
kill -HUP "$PID"
wait_until "the reload" grep -q 'event=reloaded keys=1 .*log_prompts=1' "$LOG"
ok "$(http GET /v1/models - -H "$(auth "$OLD")")" 401 "the old key after the reload"
ok "$(http GET /v1/models - -H "$(auth "$NEW")")" 200 "the new key after the reload"
alive "$CLIENTS" || fail "the streams ended while the steps were held: $(cat "$work/clients.txt")"
# A client that leaves while the steps are held: its request ends cancelled.
st=0
curl -s -m 2 -o /dev/null -H "$(auth "$NEW")" -H 'Content-Type: application/json' \
  -d '{"prompt":"left","max_tokens":4,"stream":true}' "$BASE/v1/completions" || st=$?
[ "$st" = 28 ] || fail "the stream that was left: curl exit $st, expected 28 (timed out)"
# A broken key file: the reload is refused, the new key stays.
printf 'ops %s\nops %s extra\n' "$NEW" "$OLD" >"$work/keys"
kill -HUP "$PID"
wait_until "the refused reload" grep -q 'event=reload_failed .*keys:2: a key is' "$LOG"
ok "$(http GET /v1/models - -H "$(auth "$NEW")")" 200 "the new key after a refused reload"
ok "$(http GET /v1/models - -H "$(auth "$OLD")")" 401 "the old key after a refused reload"
rm -f "$stall"
wait "$CLIENTS" || fail "streams running through the reload: $(cat "$work/clients.txt")"
[ "$(grep -c ': complete, 12 tokens, length$' "$work/clients.txt")" = 4 ] || fail "streams: $(cat "$work/clients.txt")"
for i in 0 1 2 3; do
  grep -q "event=request .*request_id=reload-$i key=ops .*status=200 completed=1 stream=1 " "$LOG" ||
    fail "stream $i's log line: $(grep "request_id=reload-$i" "$LOG")"
done
curl -s -m 10 "$BASE/metrics" >"$work/metrics"
for l in 'finished_reason="length",key_name="ops"} 4' 'finished_reason="cancelled",key_name="ops"} 1'; do
  grep -q "^qwen3d_request_finished_total{model_name=\"tiny\",$l\$" "$work/metrics" ||
    fail "no request_finished_total ... $l: $(grep finished_total "$work/metrics")"
done
# The reloaded --log-prompts applies to requests from now on.
M=qdreload5e1
ok "$(http POST /v1/completions "{\"prompt\":\"$M\",\"max_tokens\":2}" -H "$(auth "$NEW")")" 200 "a completion with the new key"
wait_until "the prompt logged after the reload" grep -q "event=prompt_text .*$M" "$LOG"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
grep -q -- "$OLD\|$NEW" "$LOG" && fail "a key reached the log"
echo "serve_keys: all checks passed"
rm -rf "$work"
