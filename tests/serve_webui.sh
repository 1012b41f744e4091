#!/bin/sh
# The web UI (GET /, GET /status, /status.json), black-box on the tiny model:
#  - over HTTP (curl): content types, the security headers, ETag
#    revalidation, gzip, HEAD and 405, the served files equal to the
#    sources, no inline script, style or handler in the pages, and
#    /status.json's geometry equal to `qwen3d inspect --json`;
#  - in headless Chromium (tests/webui/webui-checks.js): streaming, stop
#    (qwen3d_sessions_active back to 0), the thinking toggle (the prompt
#    logged with --log-prompts), thinking folded apart from the answer,
#    Markdown with hostile answers, a reload restoring the conversations,
#    the status charts under load, and no console error or CSP violation;
#  - --no-webui and the config key `no-webui = true` turn it all off (404);
#  - with --api-key-file the pages load without the key, /status.json and
#    the chat need it (curl and tests/webui/webui-auth.js).
# Chromium is the Debian package (deploy/install-deps.sh --test installs it).
NAME=serve_webui
. "$QD_SRCDIR/tests/serve/common.sh"

CHROMIUM=${QD_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || skip "$CHROMIUM is missing (apt-get install chromium, or deploy/install-deps.sh --test)"
serve_model
export QD_CHROMIUM="$CHROMIUM"
webui="$QD_SRCDIR/server/webui"
ok() { [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(head -c 300 "$work/body")"; }
header() { sed -n "s/^$1: *//Ip" "$work/headers" | tr -d '\r' | head -n 1; }

serve_start --log-prompts

# Each page and file, as the sources have it, with its type and headers.
for f in index.html:/ status.html:/status style.css:/webui/style.css chat.js:/webui/chat.js \
  common.js:/webui/common.js markdown.js:/webui/markdown.js status.js:/webui/status.js icon.svg:/webui/icon.svg; do
  file=${f%%:*} path=${f#*:}
  ok "$(http GET "$path")" 200 "GET $path"
  cmp -s "$work/body" "$webui/$file" || fail "GET $path differs from server/webui/$file"
  case $file in
    *.html) want='text/html; charset=utf-8' ;;
    *.js) want='text/javascript; charset=utf-8' ;;
    *.css) want='text/css; charset=utf-8' ;;
    *.svg) want='image/svg+xml' ;;
  esac
  [ "$(header Content-Type)" = "$want" ] || fail "GET $path: Content-Type '$(header Content-Type)', expected '$want'"
  [ "$(header X-Content-Type-Options)" = nosniff ] || fail "GET $path: no X-Content-Type-Options: nosniff"
  case "$(header Content-Security-Policy)" in
    *"default-src 'none'"*"frame-ancestors 'none'"*) ;;
    *) fail "GET $path: Content-Security-Policy '$(header Content-Security-Policy)'" ;;
  esac
done
# Those are all the page files (a new one joins the list above).
have=$(cd "$webui" && ls | grep -v '^embed\.js$' | sort | tr '\n' ' ')
[ "$have" = "chat.js common.js icon.svg index.html markdown.js status.html status.js style.css " ] ||
  fail "server/webui/ holds $have; the list above must name each file"
# The pages hold no inline script, style or event handler (the policy forbids them).
for f in "$webui"/*.html; do
  grep -Eiq '<script>|<script[^>]*>[^<]|<style|[[:space:]]style=|[[:space:]]on[a-z]+=' "$f" &&
    fail "${f##*/} has an inline script, style or handler"
done
grep -n 'innerHTML\|outerHTML\|insertAdjacentHTML\|document\.write\|eval(\|new Function' "$webui"/*.js | grep -v embed.js &&
  fail "a page script parses HTML or code from strings"

# Revalidation, gzip, HEAD, methods.
ok "$(http GET /webui/chat.js)" 200 "chat.js"
etag=$(header ETag)
[ -n "$etag" ] && [ "$(header Cache-Control)" = no-cache ] || fail "chat.js: ETag '$etag', Cache-Control '$(header Cache-Control)'"
ok "$(http GET /webui/chat.js - -H "If-None-Match: $etag")" 304 "chat.js with its ETag"
ok "$(http GET /webui/chat.js - -H 'If-None-Match: "other"')" 200 "chat.js with another ETag"
ok "$(http GET /webui/chat.js - -H 'Accept-Encoding: gzip, deflate')" 200 "chat.js gzip"
[ "$(header Content-Encoding)" = gzip ] || fail "no gzip for a client that accepts it"
gzip -dc "$work/body" | cmp -s - "$webui/chat.js" || fail "the gzip form of chat.js differs from the source"
gz_etag=$(header ETag)
[ "$gz_etag" != "$etag" ] || fail "the gzip form has the plain form's ETag"
ok "$(http GET /webui/chat.js - -H 'Accept-Encoding: gzip;q=0, br')" 200 "chat.js with gzip refused"
[ -z "$(header Content-Encoding)" ] || fail "gzip sent with q=0"
ok "$(http HEAD / - -I)" 200 "HEAD /"
ok "$(http POST / '{}')" 405 "POST /"
[ "$(header Allow)" = "GET, HEAD" ] || fail "POST /: Allow '$(header Allow)'"
ok "$(http GET /webui/nothing.js)" 404 "an unknown file"
ok "$(http GET /index.html)" 404 "/index.html"

# /status.json: the model as `qwen3d inspect` describes it.
"$QWEN3D" inspect --model "$MODEL" --json >"$work/inspect.json" || fail "qwen3d inspect failed"
kernels=$("$QWEN3D" inspect --model "$MODEL" | sed -n 's/^kernels /kernels /p' | head -n 1)
ok "$(http GET /status.json)" 200 "/status.json"
[ "$(header Content-Type)" = application/json ] || fail "/status.json Content-Type '$(header Content-Type)'"
cp "$work/body" "$work/status.json"
for k in layers hidden heads kv_heads head_size intermediate vocab; do
  got=$(json "$work/status.json" "j.model.$k")
  want=$(json "$work/inspect.json" "j.geometry.$k")
  [ "$got" = "$want" ] || fail "/status.json model.$k = $got, qwen3d inspect says $want"
done
[ "$(json "$work/status.json" 'j.model.kernels')" = "$kernels" ] ||
  fail "kernels: '$(json "$work/status.json" 'j.model.kernels')', qwen3d inspect says '$kernels'"
[ "$(json "$work/status.json" 'j.model.kernel_level')" = "$(echo "$kernels" | cut -d' ' -f2)" ] ||
  fail "kernel level '$(json "$work/status.json" 'j.model.kernel_level')' (inspect: $kernels)"
[ "$(json "$work/status.json" "['hits_total', 'misses_total', 'tokens_total', 'bytes']
  .every((k) => Number.isInteger(j.now.prefix_cache[k]) && j.now.prefix_cache[k] >= 0)")" = true ] ||
  fail "prefix_cache from the metrics: $(json "$work/status.json" 'j.now.prefix_cache')"
[ "$(json "$work/status.json" 'j.history.interval_s')" -gt 0 ] || fail "no history interval"

"$NODE" "$QD_SRCDIR/tests/webui/webui-checks.js" "$BASE" "$LOG" || fail "the browser checks failed"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"

# Off: the pages and their data are 404, the API stays.
off() {
  for p in / /status /status.json /webui/chat.js; do
    ok "$(http GET "$p")" 404 "$1: GET $p"
  done
  ok "$(http GET /v1/models)" 200 "$1: /v1/models"
}
serve_start --no-webui
grep -q 'event=listening .*webui=0' "$LOG" || fail "the listening line does not say webui=0"
off --no-webui
serve_stop
printf 'no-webui = true\n' >"$work/qwen3d.conf"
serve_start --config "$work/qwen3d.conf"
off "no-webui = true"
serve_stop

# API key: the page files need none; /status.json and the chat do.
printf 'w3b-Key-value\n' >"$work/key"
serve_start --api-key-file "$work/key"
for p in / /status /webui/chat.js /webui/style.css; do
  ok "$(http GET "$p")" 200 "GET $p without a key"
done
ok "$(http GET /status.json)" 401 "/status.json without a key"
[ "$(json "$work/body" 'j.error.code')" != undefined ] || fail "the 401 has no error body"
ok "$(http GET /status.json - -H 'Authorization: Bearer w3b-Key-valu')" 401 "/status.json with a wrong key"
ok "$(http GET /status.json - -H 'Authorization: Bearer w3b-Key-value')" 200 "/status.json with the key"
"$NODE" "$QD_SRCDIR/tests/webui/webui-auth.js" "$BASE" w3b-Key-value || fail "the browser checks with a key failed"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
grep -q 'w3b-Key-value' "$LOG" && fail "the API key reached the log"

echo "serve_webui: all checks passed"
rm -rf "$work"
