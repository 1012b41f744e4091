#!/bin/sh
# Weights read in place from the mapped model files (engine/pack.c):
#  - `inspect` counts them: the ONNX Runtime GenAI form reads its float
#    embedding and rotary caches in place, its INT4 projections repacked; the
#    standard INT4 form only its rotary caches (the tied embedding is read
#    through the packed LM head); the float form also its float weights; the
#    GenAI builder's tied form the LM head's tables its embedding lookup
#    reads, though the head itself is repacked;
#  - a plan that runs asks the kernel to read those bytes into the page cache
#    at load, so the first requests after a cold start do not wait on the
#    disk for each new embedding row, unless told not to (--no-readahead).
#    Checked on the ORT and the tied forms with the file's pages dropped first
#    (where the file system lets them go), then one short generate.
# shellcheck disable=SC2046 # roles prints four numbers, split on purpose
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init in_place

# roles FORM: the in-place count and the role bytes of $work/FORM, as "in_place emb rot float".
roles() {
  "$QWEN3D" inspect --model "$work/$1" --json >"$work/$1.json" || ort_fail "inspect failed on $1"
  ort_json "$work/$1.json" '[j.weight_bytes.in_place, j.weight_bytes.embedding, j.weight_bytes.rotary_caches,
    j.weight_bytes.float_weights].join(" ")'
}

ort_synth_tiny "$work/ort"
for c in int4-qdq float; do
  "$QWEN3D" synth --preset tiny --contract "$c" --out "$work/$c" >"$work/synth.log" 2>&1 ||
    ort_fail "qwen3d synth --contract $c: $(tail -n 3 "$work/synth.log")"
done

set -- $(roles ort)
[ "$2" -gt 0 ] && [ "$3" -gt 0 ] || ort_fail "ort-int4: no embedding or rotary bytes counted ($*)"
[ "$1" -eq $(($2 + $3)) ] || ort_fail "ort-int4: $1 bytes in place, expected embedding $2 + rotary caches $3"
echo "ort-int4: $1 bytes read in place (the embedding and the rotary caches)"
ort_in_place=$1

set -- $(roles int4-qdq)
[ "$2" -eq 0 ] || ort_fail "int4-qdq: an embedding of $2 bytes besides the tied weight"
[ "$1" -eq "$3" ] || ort_fail "int4-qdq: $1 bytes in place, expected the rotary caches' $3 (the tie is repacked)"
echo "int4-qdq: $1 bytes read in place (the rotary caches)"

# Tied as the ONNX Runtime GenAI builder writes it: GatherBlockQuantized looks
# rows up in the LM head's own codes, scales and zero points, which the head
# also repacks; they count, with the rotary caches (blocks of 32, zero points
# two per byte).
ort_node requantize-model.js --in "$work/ort" --out "$work/tied" --tie-embedding --zero-points on \
  2>"$work/tie.log" || ort_fail "requantize-model.js --tie-embedding failed: $(tail -n 3 "$work/tie.log")"
set -- $(roles tied)
V=$(ort_json "$work/tied.json" j.geometry.vocab)
D=$(ort_json "$work/tied.json" j.geometry.hidden)
head=$((V * D / 2 + V * (D / 32) * 4 + V * ((D / 32 + 1) / 2)))
[ "$1" -eq $(($3 + head)) ] ||
  ort_fail "tied: $1 bytes in place, expected rotary caches $3 + the head's codes, scales and zero points $head"
echo "tied (GatherBlockQuantized): $1 bytes read in place (rotary caches and the LM head's tables)"
tied_in_place=$1

# Float weights up to 256 KiB are read into memory at load, so not all count.
set -- $(roles float)
[ "$1" -gt $(($2 + $3)) ] && [ "$1" -le $(($2 + $3 + $4)) ] ||
  ort_fail "float: $1 bytes in place, expected more than embedding $2 + rotary $3, at most $4 more"
echo "float: $1 bytes read in place (embedding, rotary caches and the larger float weights)"

# The readahead. fincore FILE: bytes of FILE in the page cache.
fincore_bytes() {
  fincore --bytes --noheadings --output RES "$1" | tr -d ' '
}
# gen FORM [OPTION]: one short generate, from the prepared cache the first one wrote.
gen() {
  "$QWEN3D" generate --model "$work/$1" --prompt-ids 9707 --max-tokens 1 --prepared-cache "$work/cache" ${2:-} \
    >/dev/null 2>"$work/gen.err" || ort_fail "generate on $1: $(cat "$work/gen.err")"
}
# dropped FILE: drops FILE's pages from the page cache; false if the file system kept many.
dropped() {
  sync "$1"
  dd if="$1" iflag=nocache count=0 status=none
  left=$(fincore_bytes "$1")
  [ "$left" -le $(($2 / 4)) ]
}
# readahead FORM IN_PLACE [no-readahead]: a plain load reads IN_PLACE bytes of FORM's data file into
# the page cache. With "no-readahead", first a load with that flag must leave less than a quarter of
# them cached (what its one step faults in). Only the ORT form is checked so: in the tied form of the
# tiny preset the plan's own reads of the head's scales, in 2 MiB folios, are most of the file.
readahead() {
  data="$work/$1/model.onnx.data"
  gen "$1" # a first load writes the prepared cache, so the next ones read no projection from the file
  if ! dropped "$data" "$2"; then
    echo "SKIP readahead on $1: the file system kept $left bytes of the data file cached after dropping them"
    return
  fi
  got=-
  if [ "${3:-}" = no-readahead ]; then
    gen "$1" --no-readahead
    got=$(fincore_bytes "$data")
    [ "$got" -lt $(($2 / 4)) ] ||
      ort_fail "$1: one generate --no-readahead from a dropped page cache left $got bytes cached (in place: $2)"
    dropped "$data" "$2" || ort_fail "$1: the data file's pages could not be dropped a second time"
  fi
  gen "$1"
  # The reads run in the background: wait for them (a bound, not a timing check).
  for _ in $(seq 1 300); do
    got2=$(fincore_bytes "$data")
    [ "$got2" -ge "$2" ] && break
    sleep 0.1
  done
  [ "$got2" -ge "$2" ] ||
    ort_fail "$1: after one generate from a dropped page cache, $got2 bytes of the data file are cached, not the $2 read in place"
  echo "readahead on $1: $left bytes cached after dropping; one short generate left $got2 (--no-readahead: $got; in place: $2)"
}
if ! command -v fincore >/dev/null 2>&1; then
  echo "SKIP readahead: no fincore (util-linux)"
else
  readahead ort "$ort_in_place" no-readahead
  readahead tied "$tied_in_place"
fi
rm -rf "$work"
