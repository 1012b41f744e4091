#!/bin/sh
# Structured output end to end: tests/serve/structured.js with the official
# openai client against `qwen3d serve` on the tiny model (random weights, so
# all structure comes from the constraint): the 20 schemas of
# tests/serve/structured-schemas.json at temperature 0 and 0.8, streamed
# against non-streamed, JSON mode and the 400s of bad schemas. The same
# run on the 0.6b preset with more requests: bench/structured.sh.
NAME=serve_structured
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start --parallel 4 --ctx 1024
"$NODE" "$scripts/structured.js" "$BASE" tiny "$scripts/structured-schemas.json" 1 ||
  fail "structured.js"
serve_stop
