#!/bin/sh
# The prepared-weights cache (engine/prepcache.c), black-box on the tiny model:
#  - the first load writes the cache file, the second maps it ("hit"), and
#    teacher-forced logits are bit for bit those of a load without cache;
#  - a truncated file, a flipped byte in its header, a flipped byte in the
#    packed weights, a file written for other kernels (QWEN3D_CPU_HIDE),
#    and a changed model file (its mtime restored) are each reported stale
#    by inspect, rebuilt by the next load (same logits as without cache),
#    and used by the one after;
#  - two loads at once on an empty folder both succeed and leave one whole
#    file and no temporary one;
#  - `--prepared-cache off` writes nothing; a folder that cannot be made
#    still loads, warns, and `serve` still serves (log event=prepared_cache
#    state=unstored); a daemon's first start is ready while its file is
#    written (state=writing, then state=written), and its second start logs
#    state=hit.
NAME=prepcache
. "$QD_SRCDIR/tests/serve/common.sh"

M="$work/tiny"
"$QWEN3D" synth --preset tiny --out "$M" >"$work/synth.log" 2>&1 || fail "qwen3d synth: $(tail -n 3 "$work/synth.log")"
C="$work/cache"
PROMPT=9707,11,1879,0,151643,3555,30
TEACHER=1,100,1000,10000,50000,100000,151935,42

# gen NAME CACHE [ENV=VALUE...]: teacher-forced logits into $work/NAME.bin with
# --prepared-cache CACHE; sets STATE.
gen() {
  n=$1 c=$2
  shift 2
  st=0
  env "$@" "$QWEN3D" generate --model "$M" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" --max-tokens 9 \
    --threads 2 --json --dump-logits "$work/$n.bin" --prepared-cache "$c" >"$work/$n.json" \
    2>"$work/$n.err" || st=$?
  [ "$st" = 0 ] || fail "generate $n: exit $st: $(cat "$work/$n.err")"
  STATE=$(json "$work/$n.json" j.prepared_cache)
}

# inspect_cache [ENV=VALUE...]: sets ISTATE, IPATH and INOTE from inspect --json (folder $C).
inspect_cache() {
  env "$@" "$QWEN3D" inspect --model "$M" --json --prepared-cache "$C" >"$work/inspect.json" ||
    fail "inspect failed"
  ISTATE=$(json "$work/inspect.json" j.prepared_cache.state)
  IPATH=$(json "$work/inspect.json" j.prepared_cache.path)
  INOTE=$(json "$work/inspect.json" j.prepared_cache.note)
}

same() { # NAME REF WHAT
  cmp -s "$work/$1.bin" "$work/$2.bin" || fail "$3: logits differ from a load without the cache"
}

# ---- the reference, without cache; then written, then used ----------------------
inspect_cache
[ "$ISTATE" != none ] || skip "the kernels chosen here do not pack weights (nothing to cache)"
gen ref off
[ "$STATE" = off ] || fail "--prepared-cache off: state '$STATE'"
[ ! -e "$C" ] || fail "--prepared-cache off: the folder $C was made"
[ "$ISTATE" = absent ] || fail "inspect before the first load: state '$ISTATE', expected absent"
FILE=$IPATH
gen first "$C"
[ "$STATE" = written ] || fail "first load: state '$STATE', expected written"
[ -f "$FILE" ] || fail "first load: no file $FILE"
same first ref "first load"
gen hit "$C"
[ "$STATE" = hit ] || fail "second load: state '$STATE', expected hit"
same hit ref "second load (mapped cache)"
inspect_cache
[ "$ISTATE" = present ] || fail "inspect after a load: state '$ISTATE', expected present"

# expect_rebuilt WHAT NOTE-PATTERN: inspect calls the file stale for NOTE, the
# next load rebuilds it with the reference's logits, the one after uses it.
expect_rebuilt() {
  inspect_cache
  [ "$ISTATE" = stale ] || fail "$1: inspect says '$ISTATE', expected stale"
  echo "$INOTE" | grep -q -- "$2" || fail "$1: inspect's note '$INOTE' does not say '$2'"
  gen rebuilt "$C"
  [ "$STATE" = rebuilt ] || fail "$1: load state '$STATE', expected rebuilt"
  same rebuilt ref "$1: rebuilt"
  gen again "$C"
  [ "$STATE" = hit ] || fail "$1: the load after the rebuild: state '$STATE', expected hit"
  same again ref "$1: hit after the rebuild"
}

flip() { # FILE OFFSET: one byte changed
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

size=$(stat -c %s "$FILE")
truncate -s $((size - 4096)) "$FILE"
expect_rebuilt "a truncated file" "truncated"

flip "$FILE" 100
expect_rebuilt "a flipped byte in the header" "corrupt header"

# A byte in the payload (the packed weights), past the 2 MiB aligned header and table.
flip "$FILE" $(($(stat -c %s "$FILE") - 3000))
inspect_cache
[ "$ISTATE" = present ] || fail "a flipped payload byte: inspect reads headers only, says '$ISTATE'"
gen rebuilt "$C"
[ "$STATE" = rebuilt ] || fail "a flipped byte in the packed weights: state '$STATE', expected rebuilt"
same rebuilt ref "a flipped byte in the packed weights: rebuilt"
gen again "$C"
[ "$STATE" = hit ] || fail "after the payload rebuild: state '$STATE'"

# A file written for other kernels, put where this level's file belongs.
other=
for hide in avx512vnni avx512f; do
  inspect_cache QWEN3D_CPU_HIDE=$hide
  if [ "$ISTATE" != none ] && [ "$IPATH" != "$FILE" ]; then
    other=$hide
    break
  fi
done
if [ -n "$other" ]; then
  gen ref_other off QWEN3D_CPU_HIDE=$other
  gen other "$C" QWEN3D_CPU_HIDE=$other
  [ "$STATE" = written ] || fail "QWEN3D_CPU_HIDE=$other: state '$STATE', expected written"
  same other ref_other "QWEN3D_CPU_HIDE=$other"
  cp "$IPATH" "$FILE"
  expect_rebuilt "a file of other kernels (QWEN3D_CPU_HIDE=$other)" "other kernels"
else
  echo "note: only one packing kernel level runs here; the other-kernels case is left out"
fi

# A changed model file whose size and mtime stay: the content digest's samples see it.
data="$M/model.onnx.data"
touch -r "$data" "$work/mtime"
flip "$data" 4096
touch -r "$work/mtime" "$data"
inspect_cache
[ "$ISTATE" = stale ] || fail "a changed model file: inspect says '$ISTATE', expected stale"
echo "$INOTE" | grep -q "model files changed" || fail "a changed model file: note '$INOTE'"
gen ref off
gen rebuilt "$C"
[ "$STATE" = rebuilt ] || fail "a changed model file: state '$STATE', expected rebuilt"
same rebuilt ref "a changed model file"
gen again "$C"
[ "$STATE" = hit ] || fail "a changed model file, the load after: state '$STATE'"

# ---- two loads at once on an empty folder ----------------------------------------
rm -rf "$C"
"$QWEN3D" generate --model "$M" --prompt-ids "$PROMPT" --max-tokens 1 --json \
  --prepared-cache "$C" >"$work/p1.json" 2>"$work/p1.err" &
p1=$!
EXTRA_PIDS="$EXTRA_PIDS $p1"
"$QWEN3D" generate --model "$M" --prompt-ids "$PROMPT" --max-tokens 1 --json --prepared-cache "$C" \
  >"$work/p2.json" 2>"$work/p2.err" || fail "concurrent load 2: $(cat "$work/p2.err")"
wait "$p1" || fail "concurrent load 1: $(cat "$work/p1.err")"
[ "$(ls "$C" | wc -l)" = 1 ] || fail "two loads at once left: $(ls "$C")"
gen hit "$C"
[ "$STATE" = hit ] || fail "after two loads at once: state '$STATE', expected hit"
same hit ref "after two loads at once"

# ---- a folder that cannot be made -----------------------------------------------------
: >"$work/plainfile"
gen unwritable "$work/plainfile/cache"
[ "$STATE" = unstored ] || fail "an unusable folder: state '$STATE', expected unstored"
grep -q "warning: the prepared weights were not cached" "$work/unwritable.err" ||
  fail "an unusable folder: no warning on stderr: $(cat "$work/unwritable.err")"
same unwritable ref "an unusable folder"

# ---- serve: logs the state, serves without a usable folder ------------------------------
serve_model
serve_start --prepared-cache "$work/plainfile/cache"
# serve writes a new file in the background: the final state is logged when the write ends
wait_until "serve: a prepared_cache state=unstored line" grep -q 'event=prepared_cache state=unstored' "$LOG"
[ "$(http GET /health/ready)" = 200 ] || fail "serve with an unusable cache folder is not ready"
code=$(http POST /v1/completions '{"prompt":"Hello","max_tokens":3}')
[ "$code" = 200 ] || fail "serve with an unusable cache folder: completion answered $code: $(cat "$work/body")"
serve_stop
[ "$STATUS" = 0 ] || fail "serve exited $STATUS"
serve_start --prepared-cache "$work/serve-cache"
# ready before the file is written: state=writing at load, state=written from the writing thread
grep -q 'event=prepared_cache state=writing' "$LOG" || fail "serve, first start: no state=writing line"
wait_until "serve, first start: a state=written line" grep -q 'event=prepared_cache state=written' "$LOG"
serve_stop
serve_start --prepared-cache "$work/serve-cache"
grep -q 'event=prepared_cache state=hit' "$LOG" || fail "serve, second start: no state=hit line"
code=$(http POST /v1/completions '{"prompt":"Hello","max_tokens":3}')
[ "$code" = 200 ] || fail "serve from the cache: completion answered $code"
serve_stop
[ "$STATUS" = 0 ] || fail "serve exited $STATUS"

rm -rf "$work"
