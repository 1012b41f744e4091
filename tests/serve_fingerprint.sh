#!/bin/sh
# system_fingerprint of `qwen3d serve`, black-box on the tiny model: every
# completion and chat response, streamed (each chunk) or not, carries
# fp_<build>_<model>; <build> is the start of the binary's GNU build id
# (readelf -n), the same for every model; <model> is the same for the same
# folder across restarts and for a folder of links to the same files, and
# differs when one byte of one file differs. With a cache folder the digest
# is kept there: a restart on unchanged files takes it (digest=kept) and gives
# the same fingerprint; a damaged record, or a file rewritten in place with
# its size and mtime put back, is read again.
NAME=serve_fingerprint
. "$QD_SRCDIR/tests/serve/common.sh"

command -v readelf >/dev/null 2>&1 || fail "readelf (binutils) is missing"
serve_model
build=$(readelf -n "$QWEN3D" | sed -n 's/.*Build ID: *\([0-9a-f]*\).*/\1/p' | cut -c1-12)
[ ${#build} = 12 ] || fail "no GNU build id in $QWEN3D"
ok() { [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(head -c 300 "$work/body")"; }

# fingerprint MODEL [OPTIONS...]: starts a daemon on MODEL, sets FP from its responses (all equal), stops it.
fingerprint() {
  m=$1
  shift
  SERVE_MODEL=$m serve_start "$@"
  ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":2}')" 200 "a completion"
  FP=$(json "$work/body" 'j.system_fingerprint')
  ok "$(http POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}')" 200 "a chat"
  [ "$(json "$work/body" 'j.system_fingerprint')" = "$FP" ] || fail "chat: $(cat "$work/body")"
  ok "$(http POST /v1/completions '{"prompt":"hi","max_tokens":3,"stream":true}')" 200 "a stream"
  n=$(grep -c '^data: {' "$work/body")
  [ "$(grep -c "^data: {.*\"system_fingerprint\":\"$FP\"" "$work/body")" = "$n" ] && [ "$n" -ge 2 ] ||
    fail "not every chunk carries $FP: $(head -c 600 "$work/body")"
  grep -q "event=fingerprint digest=[a-z]* system_fingerprint=$FP\$" "$LOG" || fail "the fingerprint is not logged: $FP"
  serve_stop
  [ "$STATUS" = 0 ] || fail "exit status $STATUS"
}

fingerprint "$MODEL"
first=$FP
case $first in
  fp_${build}_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]) ;;
  *) fail "system_fingerprint '$first' is not fp_${build}_ and 16 hex digits" ;;
esac
fingerprint "$MODEL"
[ "$FP" = "$first" ] || fail "a restart on the same folder changed the fingerprint: $first, then $FP"

# Links to the same files: the same digest. One byte changed: another.
links="$work/links/tiny"
mkdir -p "$links"
for f in "$MODEL"/*; do ln -s "$f" "$links/${f##*/}"; done
fingerprint "$links"
[ "$FP" = "$first" ] || fail "a folder of links to the same files: $FP, not $first"
rm "$links/genai_config.json"
sed 's/}$/} /' "$MODEL/genai_config.json" >"$links/genai_config.json"
cmp -s "$MODEL/genai_config.json" "$links/genai_config.json" && fail "the copy did not change"
fingerprint "$links"
case $FP in
  fp_${build}_*) [ "$FP" != "$first" ] || fail "one byte changed in genai_config.json, the fingerprint did not" ;;
  *) fail "the build part changed with the model: $FP" ;;
esac

# The kept digest. A copy of the model, left alone long enough that its
# files are kept (none may have changed in the last 2 s).
kept="$work/kept/tiny"
cache="$work/cache"
mkdir -p "$kept"
cp "$MODEL"/* "$kept"/
sleep 3
digest_was() { grep -q "event=fingerprint digest=$1 " "$LOG" || fail "$2: not digest=$1: $(grep event=fingerprint "$LOG")"; }
fingerprint "$kept" --prepared-cache "$cache"
[ "$FP" = "$first" ] || fail "a copy of the model with a cache folder: $FP, not $first"
digest_was read "the first start with a cache folder"
ls "$cache"/tiny-*.fingerprint >/dev/null 2>&1 || fail "no digest kept in $cache: $(ls "$cache")"
fingerprint "$kept" --prepared-cache "$cache"
[ "$FP" = "$first" ] || fail "a restart on the kept digest: $FP, not $first"
digest_was kept "a restart on unchanged files"
for r in "$cache"/tiny-*.fingerprint; do printf 'x' | dd of="$r" bs=1 seek=40 conv=notrunc 2>/dev/null; done
fingerprint "$kept" --prepared-cache "$cache"
[ "$FP" = "$first" ] || fail "a damaged record: $FP, not $first"
digest_was read "a damaged record"
fingerprint "$kept" --prepared-cache "$cache"
digest_was kept "a restart after the damaged record was replaced"
# One byte rewritten in place (the newline after the opening brace becomes a
# space: valid JSON, same size, same inode), its mtime put back.
f="$kept/genai_config.json"
[ "$(head -c 2 "$f" | od -An -c | tr -d ' ')" = '{\n' ] || fail "genai_config.json does not start with {newline"
when=$(stat -c %y "$f")
size=$(stat -c %s "$f")
printf ' ' | dd of="$f" bs=1 seek=1 conv=notrunc 2>/dev/null
touch -d "$when" "$f"
[ "$(stat -c %y "$f")" = "$when" ] && [ "$(stat -c %s "$f")" = "$size" ] || fail "the mtime or size was not put back"
fingerprint "$kept" --prepared-cache "$cache"
digest_was read "a file rewritten in place with its mtime put back"
[ "$FP" != "$first" ] || fail "a file rewritten in place: the fingerprint did not change"
echo "serve_fingerprint: all checks passed"
rm -rf "$work"
