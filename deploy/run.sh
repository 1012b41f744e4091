#!/usr/bin/env bash
# Builds qwen3d, writes the default model (synthetic Qwen3-0.6B geometry) when it
# is missing, and prints its inventory.
# Usage: bash deploy/run.sh [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh

[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"

model="${1:-$PWD/models/qwen3-0.6b-synth}"
if [ ! -f "$model/model.onnx" ]; then
  ./qwen3d synth --preset 0.6b --out "$model"
fi
./qwen3d inspect --model "$model"
