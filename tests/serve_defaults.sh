#!/bin/sh
# `qwen3d serve`'s defaults, black-box on the tiny model:
#  - sampling fields a request leaves out take the model's genai_config.json
#    "search" values (qwen3d synth writes Qwen3's: temperature 0.6, top_k
#    20, top_p 0.95): GET /v1/models shows them, and a seeded request
#    without sampling fields generates what the same request with those
#    values spelled out does, not what OpenAI's defaults give;
#    --sampling-defaults openai restores OpenAI's; "do_sample": false means
#    greedy; values outside the sampler's ranges stop the start with one
#    message, unless --sampling-defaults openai.
NAME=serve_defaults
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model

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

echo "serve_defaults: all checks passed"
rm -rf "$work"
