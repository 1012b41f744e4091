#!/bin/sh
# ONNX Runtime loads and runs the tiny synth model through tests/ort/run-ort.js:
# a 7-id prompt and 8 teacher-forced steps give 9 finite, non-constant logits
# rows whose argmax matches the ids run-ort.js reports.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init ort_run

ort_synth_tiny "$work/tiny"
vocab=$(ort_json "$work/tiny/genai_config.json" j.model.vocab_size)
ort_node run-ort.js --model "$work/tiny" --prompt-ids "$ORT_PROMPT_IDS" \
  --teacher-ids "$ORT_TEACHER_IDS" --dump-logits "$work/ort.bin" --json >"$work/ort.json" ||
  ort_fail "run-ort.js failed on the tiny synth model"
rows=$(ort_json "$work/ort.json" j.ids.length)
[ "$rows" = 9 ] || ort_fail "run-ort.js reported $rows ids, expected 9 (prefill + 8 steps)"
ids=$(ort_json "$work/ort.json" 'j.ids.join(",")')
ort_node check-logits.js stats "$work/ort.bin" --rows 9 --vocab "$vocab" --ids "$ids" ||
  ort_fail "the ORT logits dump of the tiny model is not usable"
rm -rf "$work"
