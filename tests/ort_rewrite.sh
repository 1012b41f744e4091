#!/bin/sh
# The tiny synth model written again by another writer (tests/ort/rewrite-model.js:
# new names, node order, data file and layout) is the same model: ONNX Runtime
# gives bit-for-bit the same logits, and qwen3d inspect the same inventory.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init ort_rewrite

ort_synth_tiny "$work/tiny"
ort_node rewrite-model.js --in "$work/tiny" --out "$work/rewritten" --seed 7 ||
  ort_fail "rewrite-model.js could not rewrite the tiny model"
[ ! -e "$work/rewritten/model.onnx.data" ] ||
  ort_fail "rewrite-model.js kept the original data file name; the rewrite is not a different layout"
vocab=$(ort_json "$work/tiny/genai_config.json" j.model.vocab_size)

for m in tiny rewritten; do
  ort_node run-ort.js --model "$work/$m" --prompt-ids "$ORT_PROMPT_IDS" \
    --teacher-ids "$ORT_TEACHER_IDS" --dump-logits "$work/$m.bin" >/dev/null ||
    ort_fail "run-ort.js failed on the $m model"
done
ort_node check-logits.js same "$work/tiny.bin" "$work/rewritten.bin" --vocab "$vocab" ||
  ort_fail "ORT logits of the rewritten model differ from the original's"

# The rewrite itself must keep the graph inventory (read by onnx-proto).
for m in tiny rewritten; do
  ort_node onnx-inventory.js --model "$work/$m" >"$work/$m.onnx.json" ||
    ort_fail "onnx-inventory.js failed on the $m model"
done
ort_node compare-inventory.js "$work/tiny.onnx.json" "$work/rewritten.onnx.json" ||
  ort_fail "rewrite-model.js changed the graph inventory"

# qwen3d's loader must see the same inventory in both folders.
"$QWEN3D" inspect --model "$work/tiny" --json >"$work/tiny.inspect.json" 2>"$work/inspect.err" ||
  ort_fail "qwen3d inspect failed on the tiny model: $(head -n 3 "$work/inspect.err")"
"$QWEN3D" inspect --model "$work/rewritten" --json >"$work/rewritten.inspect.json" 2>"$work/inspect.err" ||
  ort_fail "qwen3d inspect loads the original but not the rewritten model: $(head -n 3 "$work/inspect.err")"
ort_node compare-inventory.js "$work/tiny.inspect.json" "$work/rewritten.inspect.json" ||
  ort_fail "qwen3d inspect reports different inventories for the original and the rewritten model"
ort_node compare-inventory.js "$work/tiny.onnx.json" "$work/tiny.inspect.json" ||
  ort_fail "qwen3d inspect and onnx-proto (tests/ort/onnx-inventory.js) read the tiny model's graph differently"
rm -rf "$work"
