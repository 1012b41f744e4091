#!/bin/sh
# fp16 KV cache at model level: teacher-forced logits of qwen3d with an fp16
# session cache against ONNX Runtime (fp32 cache) on the tiny preset and a
# 0.6b-width model with 4 layers, for a 7-id and a 300-id prompt and 32
# decode steps. ONNX Runtime runs the same steps with every past key and
# value rounded to fp16 before it is fed back (run-ort.js --round-past-f16:
# what an fp16 cache holds); qwen3d must stay within the spread ONNX Runtime
# itself shows between its int8 and fp32 numerics on those steps
# (compare-logits.js), and the fp16 run must be bit-identical at 1 and 2
# threads.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init kv_f16

ids() { # COUNT SEED: deterministic ids below the special tokens
  "$NODE" -e 'let [n,x]=process.argv.slice(1).map(Number);const a=[];for(let i=0;i<n;i++){x=(x*1103515245+12345)%2147483648;a.push(x%151643);}console.log(a.join(","))' "$1" "$2"
}

ort_synth_tiny "$work/tiny"
"$QWEN3D" synth --preset 0.6b --layers 4 --out "$work/w06l4" >"$work/synth.log" 2>&1 ||
  ort_fail "qwen3d synth --preset 0.6b --layers 4: $(tail -n 3 "$work/synth.log")"
TEACHER=$(ids 32 77)

for m in tiny w06l4; do
  vocab=$(ort_json "$work/$m/genai_config.json" j.model.vocab_size)
  ort_node rewrite-model.js --in "$work/$m" --out "$work/$m-acc0" --keep-layout --set-accuracy-level 0 ||
    ort_fail "could not write the accuracy_level 0 copy of $m"
  for p in 7 300; do
    prompt=$(ids "$p" "$p")
    ort_node run-ort.js --model "$work/$m" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --round-past-f16 \
      --dump-logits "$work/$m.$p.ort.bin" >/dev/null || ort_fail "ONNX Runtime failed on $m"
    ort_node run-ort.js --model "$work/$m-acc0" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --round-past-f16 \
      --dump-logits "$work/$m.$p.ort0.bin" >/dev/null || ort_fail "ONNX Runtime failed on $m-acc0"
    for t in 1 2; do
      "$QWEN3D" generate --model "$work/$m" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --max-tokens 33 \
        --kv-type f16 --threads $t --dump-logits "$work/$m.$p.f16.$t.bin" >/dev/null ||
        ort_fail "generate --kv-type f16 --threads $t failed on $m with a $p-token prompt"
    done
    cmp -s "$work/$m.$p.f16.1.bin" "$work/$m.$p.f16.2.bin" ||
      ort_fail "$m, $p-token prompt: fp16 KV logits differ between 1 and 2 threads"
    ort_node compare-logits.js --label "$m f16 kv, $p-token prompt" --ours "$work/$m.$p.f16.1.bin" \
      --ort "$work/$m.$p.ort.bin" --ort-fp32 "$work/$m.$p.ort0.bin" --vocab "$vocab" ||
      ort_fail "$m, $p-token prompt: fp16 KV logits and ONNX Runtime disagree"
  done
  rm -rf "$work/$m-acc0"
done
rm -rf "$work"
