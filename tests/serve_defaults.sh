#!/bin/sh
# `qwen3d serve`'s defaults, black-box on the tiny model:
#  - sampling fields a request leaves out take the model's genai_config.json
#    "search" values (qwen3d synth writes Qwen3's: temperature 0.6, top_k
#    20, top_p 0.95): GET /v1/models shows them, and a seeded request
#    without sampling fields generates what the same request with those
#    values spelled out does, not what OpenAI's defaults give;
#    --sampling-defaults openai restores OpenAI's; "do_sample": false means
#    greedy; values outside the sampler's ranges stop the start with one
#    message, unless --sampling-defaults openai;
#  - the KV budget is derived at start from the memory available less the
#    weights, and logged with its parts; --kv-budget 0 is unbounded. A tree
#    of fake /proc and /sys/fs/cgroup files (QWEN3D_TEST_SYSROOT, a hook of
#    the test build tests/serve/qwen3d-hooks) sets the memory: a cgroup v2 limit on a parent cgroup and a v1
#    container's limit are found and the budget is exactly 3/4 of (limit - working set
#    - weights), a request that could never fit it gets 503
#    kv_budget_exceeded while a smaller one is served; with no memory left
#    for any KV cache the daemon refuses to start; the installed binary
#    ignores the hook;
#  - the model_loaded line counts the bytes read in place and those the load
#    read ahead: all of them, none with the config key no-readahead.
NAME=serve_defaults
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
ids='[1,2,3,4,5,6,7,8]'

# A completion's text for the request BODY.
text() {
  [ "$(http POST /v1/completions "$1")" = 200 ] || fail "completion $1: $(cat "$work/body")"
  json "$work/body" 'j.choices[0].text'
}
# The search values of a model folder's genai_config.json, as JSON fields.
search_fields() {
  json "$1/genai_config.json" \
    '["temperature","top_p","top_k","repetition_penalty"].map(k => `"${k}":${j.search[k]}`).join(",")'
}

# ---- sampling defaults -------------------------------------------------------
# Qwen3's published generation settings (graph-contract.md 6.1).
[ "$(json "$MODEL/genai_config.json" '[j.search.do_sample, j.search.temperature, j.search.top_k, j.search.top_p].join(" ")')" = \
  "true 0.6 20 0.95" ] || fail "qwen3d synth does not write Qwen3's sampling values: $(cat "$MODEL/genai_config.json")"

serve_start --ctx 512
grep -q 'event=sampling_defaults source=model temperature=0.6 top_p=0.95 top_k=20 ' "$LOG" ||
  fail "the start log does not show the model's sampling defaults"
[ "$(http GET /v1/models)" = 200 ] || fail "/v1/models"
[ "$(json "$work/body" "const d = j.data[0].sampling_defaults, s = JSON.parse(require('fs').readFileSync('$MODEL/genai_config.json')).search;
  d.source === 'model' && d.temperature === s.temperature && d.top_p === s.top_p && d.top_k === s.top_k &&
  d.repetition_penalty === s.repetition_penalty && d.min_p === 0")" = true ] ||
  fail "/v1/models does not show the model's defaults: $(cat "$work/body")"
plain=$(text "{\"prompt\":\"Hello world\",\"max_tokens\":16,\"seed\":7}")
spelled=$(text "{\"prompt\":\"Hello world\",\"max_tokens\":16,\"seed\":7,$(search_fields "$MODEL")}")
openai=$(text '{"prompt":"Hello world","max_tokens":16,"seed":7,"temperature":1,"top_p":1,"top_k":0}')
[ "$plain" = "$spelled" ] || fail "a request without sampling fields is not sampled with the model's values"
[ "$plain" != "$openai" ] || fail "the model's defaults and OpenAI's gave the same text; the check shows nothing"
greedy=$(text '{"prompt":"Hello world","max_tokens":16,"temperature":0}')
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

serve_start --ctx 512 --sampling-defaults openai
grep -q 'event=sampling_defaults source=openai temperature=1 top_p=1 top_k=0 ' "$LOG" ||
  fail "--sampling-defaults openai: the start log does not show OpenAI's defaults"
[ "$(http GET /v1/models)" = 200 ] || fail "/v1/models"
[ "$(json "$work/body" 'const d = j.data[0].sampling_defaults; d.source === "openai" && d.temperature === 1 && d.top_p === 1 && d.top_k === 0')" = true ] ||
  fail "--sampling-defaults openai: /v1/models: $(cat "$work/body")"
[ "$(text '{"prompt":"Hello world","max_tokens":16,"seed":7}')" = "$openai" ] ||
  fail "--sampling-defaults openai: a request without sampling fields does not get OpenAI's defaults"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# Copies of the model differing only in genai_config.json's search section.
variant() { # NAME NODE-EXPRESSION-CHANGING-j.search
  d="$work/$1"
  mkdir -p "$d"
  for f in "$MODEL"/*; do ln -sf "$f" "$d/"; done
  rm "$d/genai_config.json"
  json "$MODEL/genai_config.json" "$2; JSON.stringify(j)" >"$d/genai_config.json"
}
variant greedy 'j.search.do_sample = false'
SERVE_MODEL="$work/greedy" serve_start --ctx 512
grep -q 'event=sampling_defaults source=model temperature=0 ' "$LOG" || fail "do_sample false is not greedy"
[ "$(text '{"prompt":"Hello world","max_tokens":16,"seed":7}')" = "$greedy" ] ||
  fail "do_sample false: a request without sampling fields is not greedy"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

variant hot 'j.search.temperature = 3'
st=0
"$QWEN3D" serve --model "$work/hot" --port 0 --threads 2 --ctx 512 >/dev/null 2>"$work/hot.err" || st=$?
[ "$st" = 1 ] || fail "a model with temperature 3 in genai_config.json: exit status $st"
grep -q '^qwen3d: serve: genai_config.json: search.temperature must be in \[0, 2\], got 3' "$work/hot.err" ||
  fail "the error does not name search.temperature: $(cat "$work/hot.err")"
SERVE_MODEL="$work/hot" serve_start --ctx 512 --sampling-defaults openai
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# ---- the KV budget -----------------------------------------------------------
serve_start --parallel 3 --ctx 512
line=$(grep 'event=kv_budget ' "$LOG") || fail "no kv_budget line in the start log"
budget=$(echo "$line" | sed -n 's/.*source=derived budget_bytes=\([0-9]*\) .*/\1/p')
[ -n "$budget" ] && [ "$budget" -gt 0 ] || fail "no derived budget by default: $line"
avail=$(echo "$line" | sed -n 's/.* available_bytes=\([0-9]*\) .*/\1/p')
weights=$(sed -n 's/.*event=model_loaded .* weight_bytes=\([0-9]*\) .*/\1/p' "$LOG")
full=$(sed -n 's/.*event=model_loaded .*kv_bytes_full_ctx=\([0-9]*\).*/\1/p' "$LOG")
[ -n "$weights" ] && [ -n "$full" ] || fail "no weight_bytes or kv_bytes_full_ctx in the model_loaded line"
in_place=$(sed -n 's/.*event=model_loaded .* in_place_bytes=\([0-9]*\) .*/\1/p' "$LOG")
"$QWEN3D" inspect --model "$MODEL" --json >"$work/inspect.json" || fail "inspect failed"
want=$("$NODE" -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).weight_bytes.in_place)' \
  "$work/inspect.json")
[ -n "$in_place" ] && [ "$in_place" -gt 0 ] && [ "$in_place" = "$want" ] ||
  fail "model_loaded says in_place_bytes=$in_place, inspect counts $want"
grep -q "event=model_loaded .* in_place_bytes=$in_place readahead_bytes=$in_place " "$LOG" ||
  fail "the load did not read ahead its $in_place in-place bytes: $(grep event=model_loaded "$LOG")"
[ "$budget" = $(((avail - weights) / 4 * 3)) ] || fail "the budget is not 3/4 of (available - weights): $line"
grep -q "event=model_loaded .* kv_budget=$budget\$" "$LOG" || fail "the scheduler does not use the derived budget"
grep -q 'advice=' "$LOG" && fail "the default start warns about memory: $(grep advice= "$LOG")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

serve_start --ctx 512 --kv-budget 0
grep -q 'event=kv_budget source=option budget_bytes=0 unbounded=1' "$LOG" || fail "--kv-budget 0 is not unbounded"
grep -q 'event=model_loaded .* kv_budget=0$' "$LOG" || fail "--kv-budget 0: the scheduler has a budget"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# The engine option as a config key reaches the plan: no readahead at load, the same bytes in place.
printf 'ctx = 512\nno-readahead = true\n' >"$work/no-readahead.conf"
serve_start --config "$work/no-readahead.conf"
grep -q "event=model_loaded .* in_place_bytes=$in_place readahead_bytes=0 " "$LOG" ||
  fail "config key no-readahead: the load still read ahead: $(grep event=model_loaded "$LOG")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# The rest runs the test build, whose memory figures come from a tree of
# the test's own.
hooks="$QD_BUILDDIR/tests/serve/qwen3d-hooks"
[ -x "$hooks" ] || fail "$hooks is missing (make check builds it)"
installed=$QWEN3D
QWEN3D=$hooks

# A budget for one session of 64 tokens (64/512 of a whole-context one) and
# not two, set through a cgroup v2 limit on the parent of the daemon's
# cgroup, against the parent's working set (usage less inactive files).
target=$((full / 8 + full / 64))
usage=300000000 inactive=100000000
limit=$((weights + usage - inactive + target / 3 * 4 + 3))
root="$work/sys2"
mkdir -p "$root/proc/self" "$root/sys/fs/cgroup/qwen3d.slice/qwen3d.service"
printf 'MemTotal:       99999999 kB\nMemAvailable:   99999999 kB\n' >"$root/proc/meminfo"
printf '0::/qwen3d.slice/qwen3d.service\n' >"$root/proc/self/cgroup"
printf '%s\n' "$limit" >"$root/sys/fs/cgroup/qwen3d.slice/memory.max"
printf '%s\n' "$usage" >"$root/sys/fs/cgroup/qwen3d.slice/memory.current"
printf 'anon 1\nfile 2\nactive_file 5\ninactive_file %s\n' "$inactive" >"$root/sys/fs/cgroup/qwen3d.slice/memory.stat"
printf 'max\n' >"$root/sys/fs/cgroup/qwen3d.slice/qwen3d.service/memory.max"
printf '12345\n' >"$root/sys/fs/cgroup/qwen3d.slice/qwen3d.service/memory.current"
export QWEN3D_TEST_SYSROOT="$root"
serve_start --parallel 3 --ctx 512
unset QWEN3D_TEST_SYSROOT
want=$(((limit - usage + inactive - weights) / 4 * 3))
grep -q "event=kv_budget source=derived budget_bytes=$want .* cgroup=/qwen3d.slice/qwen3d.service cgroup_version=2 cgroup_limit_bytes=$limit cgroup_usage_bytes=$((usage - inactive)) " "$LOG" ||
  fail "cgroup v2: expected a budget of $want: $(grep 'event=kv_budget' "$LOG")"
[ "$want" -ge $((full / 8)) ] && [ "$want" -lt $((full / 4)) ] || fail "the test's budget $want does not hold one session only"
[ "$(http POST /v1/completions "{\"prompt\":$ids,\"max_tokens\":100,\"temperature\":0}")" = 503 ] ||
  fail "a request that never fits the derived budget: $(cat "$work/body")"
[ "$(json "$work/body" 'j.error.code')" = kv_budget_exceeded ] || fail "503 body: $(cat "$work/body")"
[ "$(http POST /v1/completions "{\"prompt\":$ids,\"max_tokens\":56,\"temperature\":0}")" = 200 ] ||
  fail "a request that fits the derived budget: $(cat "$work/body")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# cgroup v1 (hybrid hierarchy: the memory controller's line wins) as a
# container without a cgroup namespace sees it: its host path in
# /proc/self/cgroup, its own cgroup mounted at the root. Here MemAvailable
# is the smaller figure.
root="$work/sys1"
mkdir -p "$root/proc/self" "$root/sys/fs/cgroup/memory"
printf 'MemAvailable:   %s kB\n' $(((weights + 800000000) / 1024)) >"$root/proc/meminfo"
printf '12:pids:/docker/c1\n4:cpu,memory:/docker/c1\n1:name=systemd:/docker/c1\n0::/docker/c1\n' >"$root/proc/self/cgroup"
printf '2000000000\n' >"$root/sys/fs/cgroup/memory/memory.limit_in_bytes"
printf '700000000\n' >"$root/sys/fs/cgroup/memory/memory.usage_in_bytes"
printf 'cache 1\ntotal_inactive_file 200000000\n' >"$root/sys/fs/cgroup/memory/memory.stat"
export QWEN3D_TEST_SYSROOT="$root"
serve_start --ctx 512
unset QWEN3D_TEST_SYSROOT
mem=$(((weights + 800000000) / 1024 * 1024))
want=$(((mem - weights) / 4 * 3))
grep -q "event=kv_budget source=derived budget_bytes=$want .* available_bytes=$mem mem_available_bytes=$mem cgroup=/docker/c1 cgroup_version=1 cgroup_limit_bytes=2000000000 cgroup_usage_bytes=500000000 " "$LOG" ||
  fail "cgroup v1: expected a budget of $want: $(grep 'event=kv_budget' "$LOG")"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# Nothing left for a KV cache once the weights are in: no start.
printf 'MemAvailable:   %s kB\n' $((weights / 2048)) >"$root/proc/meminfo"
st=0
QWEN3D_TEST_SYSROOT="$root" "$QWEN3D" serve --model "$MODEL" --port 0 --threads 2 --ctx 512 >/dev/null 2>"$work/small.err" ||
  st=$?
[ "$st" = 1 ] || fail "with less memory than the weights: exit status $st"
grep -q '^qwen3d: serve: no memory left for the KV cache: .*set --kv-budget' "$work/small.err" ||
  fail "with less memory than the weights: $(cat "$work/small.err")"

# The installed binary has no such hook: the same tree changes nothing.
QWEN3D=$installed
export QWEN3D_TEST_SYSROOT="$root"
serve_start --ctx 512
unset QWEN3D_TEST_SYSROOT
grep -q 'event=kv_budget source=derived .* cgroup=/docker/c1 ' "$LOG" && fail "the installed binary reads QWEN3D_TEST_SYSROOT"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

echo "serve_defaults: all checks passed"
rm -rf "$work"
