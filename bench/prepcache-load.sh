#!/bin/sh
# Load to ready with and without the prepared-weights cache, for each model
# folder given: `qwen3d generate --max-tokens 1 --json` (its load_ms: graph,
# plan, packing or cache check) and the process's peak RSS (GNU time's %M,
# the load and one token), then decode speed from `qwen3d bench` with the
# cache off and mapped.
#
#   bench/prepcache-load.sh [-r REPEAT] [-t THREADS] MODEL_DIR...
#
# Per model: "off" (--prepared-cache off: packed in memory, nothing
# written), "cold" (an empty cache folder: packed and written, fsync
# included), "warm" (the file just written, mapped and verified), REPEAT
# times each (default 3), medians printed. The model's own files are in the
# page cache for all of them (read by the runs before); the cache file too
# for "warm". QWEN3D (default: qwen3d on the PATH) names the binary.
set -eu
QWEN3D=${QWEN3D:-qwen3d}
repeat=3 threads=2
while getopts r:t: o; do
  case $o in
  r) repeat=$OPTARG ;;
  t) threads=$OPTARG ;;
  *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r REPEAT] [-t THREADS] MODEL_DIR..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# load MODEL CACHE: one "load_ms rss_mib state" line.
load() {
  /usr/bin/time -f '%M' -o "$tmp/rss" "$QWEN3D" generate --model "$1" --prompt-ids 1,2,3 --max-tokens 1 \
    --threads "$threads" --json --prepared-cache "$2" >"$tmp/out.json"
  node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    console.log(j.timings.load_ms.toFixed(0), Math.round(process.argv[2] / 1024), j.prepared_cache)' \
    "$tmp/out.json" "$(tail -n 1 "$tmp/rss")"
}

decode() { # MODEL CACHE: decode tok/s of a 32-token prompt, 64 tokens
  "$QWEN3D" bench --model "$1" --prompt-len 32 --gen 64 --contexts 128 --context-steps 4 --threads "$threads" \
    --prepared-cache "$2" --json | head -n 1 |
    node -e 'let s = ""; process.stdin.on("data", d => s += d).on("end", () =>
      console.log(JSON.parse(s).decode_tokens_per_s.toFixed(2)))'
}

printf '%s\n' "$("$QWEN3D" inspect --model "$1" | grep '^kernels')"
printf '%-24s %-5s %9s %9s %9s %s\n' model case load_ms rss_MiB decode states
for m in "$@"; do
  for case in off cold warm; do
    : >"$tmp/rows"
    for i in $(seq "$repeat"); do
      c="$tmp/cache"
      [ "$case" = off ] && c=off
      [ "$case" = cold ] && rm -rf "$tmp/cache"
      load "$m" "$c" >>"$tmp/rows"
    done
    dec=-
    [ "$case" = off ] && dec=$(decode "$m" off)
    [ "$case" = warm ] && dec=$(decode "$m" "$tmp/cache")
    printf '%-24s %-5s %9s %9s %9s %s\n' "$(basename "$m")" "$case" "$(cut -d' ' -f1 "$tmp/rows" | median)" \
      "$(cut -d' ' -f2 "$tmp/rows" | median)" "$dec" "$(cut -d' ' -f3 "$tmp/rows" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
  done
  rm -rf "$tmp/cache"
done
