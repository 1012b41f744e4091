# Sourced by tests/ort_*.sh. Gives each test a fresh folder in the build tree
# (the source tree is read-only under distcheck) and the helpers below.
set -eu

ORT_DIR="$QD_SRCDIR/tests/ort"

# ort_init NAME: fresh $work folder for this test; removed again on success.
ort_init() {
  work="$QD_BUILDDIR/tests/ort-work/$1"
  rm -rf "$work"
  mkdir -p "$work"
}

ort_fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ort_node SCRIPT ARGS...: runs one of the tests/ort scripts.
ort_node() {
  script="$1"
  shift
  "$NODE" "$ORT_DIR/$script" "$@"
}

# ort_synth_tiny DIR: the tiny preset, the model every make-check test uses.
ort_synth_tiny() {
  "$QWEN3D" synth --preset tiny --out "$1" >"$work/synth.log" 2>&1 ||
    ort_fail "qwen3d synth --preset tiny --out $1: $(tail -n 3 "$work/synth.log")"
}

# ort_synth_w06l4 DIR: a 0.6b-width model of 4 layers.
ort_synth_w06l4() {
  "$QWEN3D" synth --preset 0.6b --layers 4 --out "$1" >"$work/synth.log" 2>&1 ||
    ort_fail "qwen3d synth --preset 0.6b --layers 4: $(tail -n 3 "$work/synth.log")"
}

# ort_ids COUNT SEED: deterministic ids below the special tokens.
ort_ids() {
  "$NODE" -e 'let [n,x]=process.argv.slice(1).map(Number);const a=[];for(let i=0;i<n;i++){x=(x*1103515245+12345)%2147483648;a.push(x%151643);}console.log(a.join(","))' "$1" "$2"
}

# ort_json FILE EXPR: evaluates a JavaScript expression over the JSON in FILE (as j).
ort_json() {
  "$NODE" -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
process.stdout.write(String(eval(process.argv[2])));' "$1" "$2"
}

# A fixed prompt and teacher-forced ids, spread over the vocabulary.
ORT_PROMPT_IDS=9707,11,1879,0,151643,3555,30
ORT_TEACHER_IDS=1,100,1000,10000,50000,100000,151935,42
