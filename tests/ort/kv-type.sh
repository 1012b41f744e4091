# Sourced by tests/kv_f16.sh and tests/kv_q8.sh with KV_TYPE set: the
# session cache of that type at model level. Teacher-forced logits of qwen3d
# against ONNX Runtime (fp32 cache) on the tiny preset and a 0.6b-width model
# with 4 layers, for a 7-id and a 300-id prompt and 32 decode steps. ONNX
# Runtime runs the same steps with every past key and value rounded to what
# the cache holds before it is fed back (run-ort.js --round-past); qwen3d
# must stay within the spread ONNX Runtime itself shows between its int8 and
# fp32 numerics on those steps (compare-logits.js) times KV_FACTOR, and its
# run must be bit-identical at 1 and 2 threads.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init "kv_$KV_TYPE"

ort_synth_tiny "$work/tiny"
ort_synth_w06l4 "$work/w06l4"
TEACHER=$(ort_ids 32 77)

for m in tiny w06l4; do
  vocab=$(ort_json "$work/$m/genai_config.json" j.model.vocab_size)
  ort_node rewrite-model.js --in "$work/$m" --out "$work/$m-acc0" --keep-layout --set-accuracy-level 0 ||
    ort_fail "could not write the accuracy_level 0 copy of $m"
  for p in 7 300; do
    prompt=$(ort_ids "$p" "$p")
    ort_node run-ort.js --model "$work/$m" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --round-past "$KV_TYPE" \
      --dump-logits "$work/$m.$p.ort.bin" >/dev/null || ort_fail "ONNX Runtime failed on $m"
    ort_node run-ort.js --model "$work/$m-acc0" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --round-past "$KV_TYPE" \
      --dump-logits "$work/$m.$p.ort0.bin" >/dev/null || ort_fail "ONNX Runtime failed on $m-acc0"
    for t in 1 2; do
      "$QWEN3D" generate --model "$work/$m" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --max-tokens 33 \
        --kv-type "$KV_TYPE" --threads $t --dump-logits "$work/$m.$p.$KV_TYPE.$t.bin" >/dev/null ||
        ort_fail "generate --kv-type $KV_TYPE --threads $t failed on $m with a $p-token prompt"
    done
    cmp -s "$work/$m.$p.$KV_TYPE.1.bin" "$work/$m.$p.$KV_TYPE.2.bin" ||
      ort_fail "$m, $p-token prompt: $KV_TYPE KV logits differ between 1 and 2 threads"
    ort_node compare-logits.js --factor "$KV_FACTOR" --label "$m $KV_TYPE kv, $p-token prompt" --ours "$work/$m.$p.$KV_TYPE.1.bin" \
      --ort "$work/$m.$p.ort.bin" --ort-fp32 "$work/$m.$p.ort0.bin" --vocab "$vocab" ||
      ort_fail "$m, $p-token prompt: $KV_TYPE KV logits and ONNX Runtime disagree"
  done
  rm -rf "$work/$m-acc0"
done
rm -rf "$work"
