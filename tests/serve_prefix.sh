#!/bin/sh
# The prompt-prefix cache, black-box (tests/serve/prefix-client.js, through
# the openai npm client): a prompt sharing a long prefix with an earlier one
# reports the shared length as usage.prompt_tokens_details.cached_tokens,
# streamed or not, and generates the same greedy text as a daemon with
# --no-prefix-cache; a cancelled request's prompt is reused by the next one;
# a chat's turns reuse exactly the tokens their rendered prompts share;
# the metrics count hits, misses and reused tokens; and under a budget that
# holds one entry, entries are evicted least recently used first and the
# cache's bytes never pass the budget.
NAME=serve_prefix
. "$QD_SRCDIR/tests/serve/common.sh"

serve_model
serve_start --parallel 2
ON=$BASE
ON_LOG=$LOG
serve_start --parallel 2 --no-prefix-cache
OFF=$BASE

# One entry's bytes, measured: the tiny budget holds one entry and a half.
entry=$("$NODE" "$scripts/prefix-client.js" measure "$ON") || fail "prefix-client.js measure"
[ "$entry" -gt 0 ] 2>/dev/null || fail "one entry's bytes: '$entry'"
budget=$((entry + entry / 2))
echo "one entry: $entry bytes; tiny budget: $budget bytes"

"$NODE" "$scripts/prefix-client.js" main "$ON" "$OFF" "$ON_LOG" "$MODEL" || fail "prefix-client.js main"

serve_start --parallel 2 --prefix-cache-bytes "$budget"
"$NODE" "$scripts/prefix-client.js" evict "$BASE" "$budget" || fail "prefix-client.js evict"
