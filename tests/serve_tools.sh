#!/bin/sh
# Tool calls end to end: tests/serve/tools.js with the official openai
# client against `qwen3d serve` on the tiny model (random weights, so every
# call's structure comes from the constraint): tool_choice required and
# named over the object schemas of tests/serve/structured-schemas.json at
# temperature 0 and 0.8, parallel calls, streamed deltas against the
# non-streamed message, auto, JSON mode and the 400s of bad tools. The same
# run on the 0.6b preset with more requests: bench/structured.sh.
NAME=serve_tools
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start --parallel 4 --ctx 2048
"$NODE" "$scripts/tools.js" "$BASE" tiny "$scripts/structured-schemas.json" 1 ||
  fail "tools.js"
serve_stop
