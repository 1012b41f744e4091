#!/bin/sh
# Writes the onnx target's seeds into OUTDIR: those of seed_onnx (every graph
# contract, from the synth writer) and the other forms an ONNX Runtime GenAI
# export takes, made by tests/ort/requantize-model.js from seed_onnx's
# miniature ORT GenAI models: zero points, blocks of 16, 64 and 128 (partial
# last blocks included), 8-bit codes (k_quant_mixed, the head alone, all) and
# tied embeddings through GatherBlockQuantized. So the replay under the
# sanitizers and the fuzzer's mutations reach those loaders and kernels too.
#
# Usage: seed_forms.sh SEED_ONNX SRCDIR OUTDIR
# Environment: NODE (default node), NODE_PATH holding onnx-proto (tests/npm).
set -eu
seed_onnx=$1 srcdir=$2 out=$3
node=${NODE:-node}
"$seed_onnx" "$out"
scratch="$out/.seed-forms-scratch"
rm -rf "$scratch"
mkdir -p "$scratch"
# Each source geometry is written once, by the first form that needs it.
# NAME GEOMETRY requantize-model.js options...
form() {
  name=$1 geom=$2
  shift 2
  [ -d "$scratch/$geom" ] || "$seed_onnx" --folder "$geom" "$scratch/$geom"
  "$node" "$srcdir/tests/ort/requantize-model.js" --in "$scratch/$geom" --out "$scratch/$name" "$@" \
    2>"$scratch/stderr" ||
    { cat "$scratch/stderr" >&2; echo "seed_forms: requantize-model.js $* failed on $geom" >&2; exit 1; }
  "$seed_onnx" --pack "$geom-$name" "$scratch/$name" "$out"
  rm -rf "$scratch/$name"
}
form zp-b32 l1-d32 --zero-points on
form mix8-tie l1-d32 --eight-bit mixed --tie-embedding
form all8-b64 l1-d32 --eight-bit all --zero-points off --block-size 64
form tie4-b16 l1-d32 --block-size 16 --tie-embedding
form sym-b128 l2-d64 --zero-points off --block-size 128
form zp-b64 l2-d64 --block-size 64
form head8-tie l2-d64 --eight-bit head --zero-points off --tie-embedding
rm -rf "$scratch"
