#!/bin/sh
# Persistent KV sessions against the graph's tensor contract: teacher-forced
# logits must be bit-for-bit equal for prompts of 1, 7 and 300 tokens with 64
# decode steps, on the tiny preset and on a 0.6b-width model with 4 layers.
# The persistent mode must move exactly the new token's K and V bytes per
# decoded token; the tensor mode's figure grows with the context. Last,
# bench's --profile rows in --json form.
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

# bench --profile --json: every line one JSON row, each case with its own
# profile (the prompt's prefill and decode, a context's steps, a batch's steps).
"$QWEN3D" bench --model "$work/tiny" --prompt-len 7 --gen 4 --repeat 1 --contexts 128 --context-steps 4 \
  --batch 1,2 --profile --json >"$work/tiny.profile.json" || ort_fail "bench --profile --json failed on tiny"
"$NODE" -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
const want = {prompt: ["profile_prefill_ms", "profile_decode_ms_per_token"], context: ["profile_decode_ms_per_token"],
              batch: ["profile_decode_ms_per_step"]};
const seen = {};
for (const l of lines) {
  const j = JSON.parse(l); /* throws on a line that is not JSON */
  for (const k of want[j.case]) {
    const p = j[k];
    if (!p || !(p.MatMulNBits > 0) || !(p.GroupQueryAttention > 0))
      throw new Error(`${j.case} row lacks ${k} with MatMulNBits and GroupQueryAttention times: ${l}`);
  }
  seen[j.case] = (seen[j.case] || 0) + 1;
}
if (seen.prompt !== 1 || seen.context !== 1 || seen.batch !== 2)
  throw new Error("expected 1 prompt, 1 context and 2 batch rows, got " + JSON.stringify(seen));
' "$work/tiny.profile.json" || ort_fail "bench --profile --json rows (above)"
echo "tiny: bench --profile --json gives one JSON row per case, each with its op profile"
rm -rf "$work"
