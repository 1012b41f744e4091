#!/bin/sh
# Persistent KV sessions against the graph's tensor contract: teacher-forced
# logits must be bit-for-bit equal for prompts of 1, 7 and 300 tokens with 64
# decode steps, on the tiny preset and on a 0.6b-width model with 4 layers.
# The persistent mode must move exactly the new token's K and V bytes per
# decoded token; the tensor mode's figure grows with the context.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init kv_modes

ort_synth_tiny "$work/tiny"
ort_synth_w06l4 "$work/w06l4"
TEACHER=$(ort_ids 64 99)

for m in tiny w06l4; do
  for p in 1 7 300; do
    prompt=$(ort_ids "$p" "$p")
    for mode in tensor persistent; do
      "$QWEN3D" generate --model "$work/$m" --prompt-ids "$prompt" --teacher-ids "$TEACHER" --max-tokens 65 \
        --kv-mode "$mode" --kv-type f32 --dump-logits "$work/$m.$p.$mode.bin" >/dev/null ||
        ort_fail "generate --kv-mode $mode failed on $m with a $p-token prompt"
    done
    cmp -s "$work/$m.$p.tensor.bin" "$work/$m.$p.persistent.bin" ||
      ort_fail "$m, $p-token prompt: persistent and tensor KV modes give different logits"
    size=$(wc -c <"$work/$m.$p.tensor.bin")
    [ "$size" -eq $((65 * 151936 * 4)) ] || ort_fail "$m: expected 65 logits rows, the dump has $size bytes"
  done
  echo "$m: tensor and persistent logits identical for prompts of 1, 7 and 300 tokens (65 rows each)"

  # bytes moved per decoded token, as the engine counts them
  layers=$("$QWEN3D" inspect --model "$work/$m" --json | ort_json /dev/stdin j.geometry.layers)
  kvh=$("$QWEN3D" inspect --model "$work/$m" --json | ort_json /dev/stdin j.geometry.kv_heads)
  head=$("$QWEN3D" inspect --model "$work/$m" --json | ort_json /dev/stdin j.geometry.head_size)
  want=$((layers * 2 * kvh * head * 4))
  for mode in persistent tensor; do
    "$QWEN3D" bench --model "$work/$m" --prompt-len 7 --gen 4 --repeat 1 --contexts 128,1024 --context-steps 4 \
      --kv-mode "$mode" --json >"$work/$m.bench.$mode.json" || ort_fail "bench --kv-mode $mode failed on $m"
  done
  for c in 128 1024; do
    got=$(grep "\"context\":$c," "$work/$m.bench.persistent.json" | ort_json /dev/stdin j.kv_bytes_copied_per_token)
    [ "$got" = "$want" ] ||
      ort_fail "$m: persistent mode moved $got KV bytes per token at context $c, expected exactly $want"
  done
  t128=$(grep '"context":128,' "$work/$m.bench.tensor.json" | ort_json /dev/stdin j.kv_bytes_copied_per_token)
  t1024=$(grep '"context":1024,' "$work/$m.bench.tensor.json" | ort_json /dev/stdin j.kv_bytes_copied_per_token)
  [ "$t1024" -gt "$t128" ] && [ "$t128" -gt "$want" ] ||
    ort_fail "$m: tensor mode should move more than $want bytes per token, growing with context (got $t128, $t1024)"
  echo "$m: KV bytes per decoded token: persistent $want at 128 and 1024; tensor $t128 at 128, $t1024 at 1024"
done

rm -rf "$work"
