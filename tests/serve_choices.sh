#!/bin/sh
# `n` and `best_of` black-box, on the tiny model with the real Qwen3
# tokenizer (tests/serve/choices.js: the openai client and raw HTTP; best_of
# checked against cumulative log-probabilities computed from `qwen3d
# generate --dump-logits` and against the daemon's own logprobs). The daemon
# is tests/serve/qwen3d-hooks, whose QWEN3D_TEST_STALL lets the client hold
# the steps while it disconnects; the prefix cache keeps prompts from 16
# tokens so that choices fork from a cache hit.
NAME=serve_choices
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start_hooks "$work/stall" --parallel 4 --ctx 512 --prefix-min-tokens 16

"$NODE" "$scripts/choices.js" "$BASE" tiny "$QWEN3D" "$MODEL" 4 "$work" || fail "choices.js"

rm -f "$work/stall"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM"
echo "serve_choices: all checks passed"
rm -rf "$work"
