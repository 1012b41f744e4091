#!/bin/sh
# bench --profile: each case (a prompt's prefill and decode, a context's
# steps, a batch's steps) carries its own op profile, as a titled block in
# the text form and as fields of its row in --json, where every line must
# stay one JSON object.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init bench_profile

ort_synth_tiny "$work/tiny"
args="--model $work/tiny --prompt-len 7 --gen 4 --repeat 1 --contexts 128 --context-steps 4 --batch 1,2 --profile"

# shellcheck disable=SC2086 # args is a word list
"$QWEN3D" bench $args --json >"$work/profile.json" || ort_fail "bench --profile --json failed on tiny"
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
  if (j.case === "prompt" && !(j.in_place_bytes > 0)) /* the float embedding, at least */
    throw new Error(`the prompt row lacks in_place_bytes: ${l}`);
  /* The fields every row carries (design.md); a context row ran no prefill. */
  for (const k of ["load_ms", "prepared_bytes", "rss_bytes", "decode_ms_median", "decode_ms_p90",
                   "decode_tokens_per_s", "kv_bytes_copied_per_token", "threads"])
    if (typeof j[k] !== "number" || !(j[k] >= 0)) throw new Error(`${j.case} row: ${k} is not a number: ${l}`);
  for (const k of ["ttft_ms", "prefill_tokens_per_s"])
    if (j.case === "context" ? j[k] !== null : !(j[k] > 0))
      throw new Error(`${j.case} row: ${k} is ${j[k]}: ${l}`);
  seen[j.case] = (seen[j.case] || 0) + 1;
}
if (seen.prompt !== 1 || seen.context !== 1 || seen.batch !== 2)
  throw new Error("expected 1 prompt, 1 context and 2 batch rows, got " + JSON.stringify(seen));
' "$work/profile.json" || ort_fail "bench --profile --json rows (above)"
echo "bench --profile --json: one JSON row per case, each with its op profile"

# The text form: each profile block's title, then its op lines, each case's
# block before that case's summary line.
# shellcheck disable=SC2086
"$QWEN3D" bench $args >"$work/profile.txt" || ort_fail "bench --profile failed on tiny"
"$NODE" -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n");
const titles = ["prefill profile (ms for the prompt, share):", "decode profile (ms per token, share):",
                "context 128 decode profile (ms per token, share):",
                "batch 1 decode profile (ms per step of the batch, share):",
                "batch 2 decode profile (ms per step of the batch, share):"];
const summary = [/^prompt +7:/, /^prompt +7:/, /^context +128:/, /^batch +1:/, /^batch +2:/];
titles.forEach((t, n) => {
  const at = lines.findIndex(l => l.trim() === t);
  if (at < 0)
    throw new Error("no profile block titled \"" + t + "\"");
  const block = [];
  for (let i = at + 1; i < lines.length && /^    \S/.test(lines[i]); i++)
    block.push(lines[i]);
  for (const op of ["MatMulNBits", "GroupQueryAttention"])
    if (!block.some(l => l.trim().startsWith(op + " ")))
      throw new Error("block \"" + t + "\" has no " + op + " line");
  const after = lines.slice(at + 1 + block.length).findIndex(l => summary[n].test(l));
  if (after < 0)
    throw new Error("block \"" + t + "\" is not followed by its case summary line");
});
' "$work/profile.txt" || { cat "$work/profile.txt" >&2; ort_fail "bench --profile text blocks (above)"; }
echo "bench --profile: a titled op block before each case's summary line"
rm -rf "$work"
