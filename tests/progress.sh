#!/bin/sh
# Progress of long work: `synth`, a model load (`generate`, `bench`) and the
# cases of `bench` draw a progress line on stderr when it is a terminal (a
# pseudo-terminal from util-linux's `script` here), and leave it erased. With
# stderr not a terminal, or with --json, nothing of it appears: stderr stays
# empty and stdout is byte for byte what the same command writes under the
# terminal (synth's elapsed seconds aside), with no control characters.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init progress

command -v script >/dev/null || ort_fail "util-linux's script is needed for a pseudo-terminal"

# on_tty NAME COMMAND: runs COMMAND (a shell string, its stdout redirected by the
# caller) under a pseudo-terminal; $work/NAME.tty gets what the terminal showed.
on_tty() {
  script -qec "$2" "$work/$1.tty" </dev/null >/dev/null || ort_fail "$1 under a terminal failed: $(tail -c 300 "$work/$1.tty")"
}

# shown NAME PATTERN: the terminal showed a progress line matching PATTERN
# (an extended regular expression), and the line was erased at the end:
# after the last erase nothing but the end of the transcript follows.
shown() {
  "$NODE" -e '
const [file, pat] = process.argv.slice(1);
const t = require("fs").readFileSync(file, "latin1");
const body = t.slice(t.indexOf("\n") + 1, t.lastIndexOf("\nScript done"));
const lines = body.split("\r\x1b[K").filter((l) => l.length);
if (!lines.some((l) => new RegExp(pat).test(l))) {
  console.error(`no progress line matches /${pat}/ in ${JSON.stringify(body.slice(0, 400))}`);
  process.exit(1);
}
if (!body.endsWith("\r\x1b[K") && !/\r\x1b\[K\s*$/.test(body)) {
  console.error(`the progress line is not erased at the end: ${JSON.stringify(body.slice(-200))}`);
  process.exit(1);
}' "$work/$1.tty" "$2" || ort_fail "$1: no progress on the terminal, or not erased"
}

# quiet NAME: the terminal showed nothing at all (--json).
quiet() {
  "$NODE" -e '
const t = require("fs").readFileSync(process.argv[1], "latin1");
const body = t.slice(t.indexOf("\n") + 1, t.lastIndexOf("\nScript done"));
if (body.trim().length) { console.error(`stderr showed ${JSON.stringify(body.slice(0, 300))}`); process.exit(1); }' \
    "$work/$1.tty" || ort_fail "$1: --json drew on the terminal"
}

# plain FILE...: no carriage return or escape character.
plain() {
  for f; do
    if LC_ALL=C grep -q "$(printf '[\r\033]')" "$f"; then ort_fail "$f holds control characters"; fi
  done
}

# synth: bytes of model.onnx.data written.
"$QWEN3D" synth --preset tiny --out "$work/tiny" >"$work/synth.out" 2>"$work/synth.err" || ort_fail "synth failed"
on_tty synth "'$QWEN3D' synth --preset tiny --out '$work/tiny2' >'$work/synth2.out'"
shown synth "^writing $work/tiny2/model\.onnx\.data: [0-9.]+ of [0-9.]+ MiB \([0-9]+%\)"
shown synth "MiB \(100%\)"
[ ! -s "$work/synth.err" ] || ort_fail "synth wrote to a piped stderr: $(cat "$work/synth.err")"
plain "$work/synth.out" "$work/synth2.out"
sed -e "s|$work/tiny2|$work/tiny|" -e 's/, [0-9.]* s$//' "$work/synth2.out" >"$work/synth2.cmp"
sed -e 's/, [0-9.]* s$//' "$work/synth.out" >"$work/synth.cmp"
cmp -s "$work/synth.cmp" "$work/synth2.cmp" || ort_fail "synth printed differently under a terminal"
cmp -s "$work/tiny/model.onnx.data" "$work/tiny2/model.onnx.data" || ort_fail "synth wrote other weights under a terminal"

# generate: the load (bytes of weights repacked); --json draws nothing.
gen="'$QWEN3D' generate --model '$work/tiny' --prompt-ids $ORT_PROMPT_IDS --max-tokens 8"
"$QWEN3D" generate --model "$work/tiny" --prompt-ids "$ORT_PROMPT_IDS" --max-tokens 8 >"$work/gen.out" 2>"$work/gen.err" ||
  ort_fail "generate failed"
on_tty gen "$gen >'$work/gen2.out'"
shown gen "^loading $work/tiny"
# The bytes are those of the repacked weights, which every SIMD level has (ref reads the originals).
if "$QWEN3D" inspect --model "$work/tiny" | grep -q "(packed"; then
  shown gen "^loading $work/tiny: [0-9.]+ of [0-9.]+ MiB \(100%\)"
fi
[ ! -s "$work/gen.err" ] || ort_fail "generate wrote to a piped stderr: $(cat "$work/gen.err")"
plain "$work/gen.out"
cmp -s "$work/gen.out" "$work/gen2.out" || ort_fail "generate printed differently under a terminal"
on_tty gen-json "$gen --json >'$work/gen.json'"
quiet gen-json

# bench: the load, then the case being measured and its run.
b="'$QWEN3D' bench --model '$work/tiny' --prompt-len 5,9 --gen 4 --repeat 2 --contexts 64 --context-steps 3"
eval "$b" >"$work/bench.out" 2>"$work/bench.err" || ort_fail "bench failed"
on_tty bench "$b >'$work/bench2.out'"
shown bench "^loading $work/tiny"
shown bench "^bench: prompt 5 \(case 1 of 3\), run 1 of 2: prefill"
shown bench "^bench: prompt 9 \(case 2 of 3\), run 2 of 2: prefill"
shown bench "^bench: context 64 \(case 3 of 3\): filling the cache"
[ ! -s "$work/bench.err" ] || ort_fail "bench wrote to a piped stderr: $(cat "$work/bench.err")"
plain "$work/bench.out" "$work/bench2.out"
[ "$(wc -l <"$work/bench.out")" -eq "$(wc -l <"$work/bench2.out")" ] || ort_fail "bench printed other lines under a terminal"
on_tty bench-json "$b --json >'$work/bench.json'"
quiet bench-json
plain "$work/bench.json"
[ "$(wc -l <"$work/bench.json")" -eq 3 ] || ort_fail "bench --json printed $(wc -l <"$work/bench.json") lines, not 3"

echo "progress drawn on a terminal for synth, generate and bench, absent from pipes and --json"
rm -rf "$work"
