#!/bin/sh
# The native Qwen3 chat template (api/chat_template.c, driven by
# tests/chat/render_c) renders every conversation of tests/chat/cases.json
# exactly as the real Jinja template of the Qwen3 tokenizer package does,
# rendered by @huggingface/jinja (tests/chat/render.js); and so does the
# server's way, each case sent as a chat completions body through the
# request parser (render_c --request): tools, an assistant's tool_calls and
# the tool results of a round trip included.
set -eu
work="$QD_BUILDDIR/tests/chat-work"
mkdir -p "$work"
cases="$QD_SRCDIR/tests/chat/cases.json"
"$QD_BUILDDIR/tests/chat/render_c" "$cases" >"$work/native.json" || {
  echo "chat_template: render_c failed on $cases" >&2
  exit 1
}
"$NODE" "$QD_SRCDIR/tests/chat/render.js" "$cases" --compare "$work/native.json"
"$QD_BUILDDIR/tests/chat/render_c" --request "$cases" >"$work/request.json" || {
  echo "chat_template: render_c --request failed on $cases" >&2
  exit 1
}
"$NODE" "$QD_SRCDIR/tests/chat/render.js" "$cases" --compare "$work/request.json"
rm -rf "$work"
