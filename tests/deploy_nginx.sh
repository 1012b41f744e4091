#!/bin/sh
# Three replicas of the tiny model behind a real nginx (Debian's, installed
# by deploy/install-deps.sh --test; the test fails without it) running the
# shipped deploy/nginx/qwen3d.conf, with only its addresses rewritten: the
# balancer on a free loopback port, the replicas on theirs, the gates'
# sockets in a scratch folder. All traffic stays on loopback.
#  - First the daemon's side of the retry rule, on a replica of its own: a
#    non-streaming request cut by the drain deadline after it started
#    answers 500, one that never got a slot 503 (nginx retries 503s only).
#  - tests/deploy/lb-driver.js then drives a fixed number of streaming
#    requests, a fixed number at a time: affinity (same X-Affinity-Key, same
#    replica, per the replicas' own requests_total; a key's later requests
#    reuse its prompt prefix there: cached_tokens > 0, and
#    qwen3d_prefix_cache_hits_total grows on its home replica only) and
#    least_conn spread;
#    kill -9 of replica 1 mid-run (only the streams in flight on it end,
#    truncated; the rest complete, new work goes to the others); SIGTERM of
#    replica 2 mid-run (nothing fails, its streams complete, it exits 0).
#    It prints the figures.
# About 1 to 2 minutes on a 2-core machine, so it runs in `make check`.
NAME=deploy_nginx
. "$QD_SRCDIR/tests/serve/common.sh"
. "$QD_SRCDIR/tests/deploy/common.sh"

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || fail "nginx is not installed: this test needs Debian's nginx (deploy/install-deps.sh --test)"
serve_model

# --- the daemon: 503 only before a request gets a slot -------------------
serve_start --parallel 1 --queue 4 --drain-timeout 1
long='{"model":"tiny","prompt":"A long tale","max_tokens":4000,"temperature":0}'
for r in started queued; do
  curl -s -m 60 -o "$work/$r.body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$long" \
    "$BASE/v1/completions" >"$work/$r.code" &
  EXTRA_PIDS="$EXTRA_PIDS $!"
  # the first holds the one slot before the second is sent
  wait_until "a request to get the slot" metric_is qwen3d_sessions_active 1
done
wait_until "the second request to queue" metric_is qwen3d_requests_waiting 1
serve_stop
for r in started queued; do
  wait_until "an answer to the $r request" test -s "$work/$r.code"
done
[ "$(cat "$work/started.code")" = 500 ] && grep -q '"code":"shutting_down"' "$work/started.body" ||
  fail "a request cut after it started answered $(cat "$work/started.code"): $(cat "$work/started.body")"
[ "$(cat "$work/queued.code")" = 503 ] && grep -q '"code":"shutting_down"' "$work/queued.body" ||
  fail "a request that never started answered $(cat "$work/queued.code"): $(cat "$work/queued.body")"
echo "deploy_nginx: cut after it started: 500; never started: 503 (both shutting_down)"

# --- three replicas and nginx --------------------------------------------
for r in r1 r2 r3; do
  replica_conf "$work/$r.conf" threads=1 parallel=2 queue=16 drain-timeout=60
  replica_launch $r "$work/$r.conf"
done
for r in r1 r2 r3; do replica_wait $r; done

# Unix socket paths must stay short (108 bytes): the gates live in /tmp.
socks=$(mktemp -d /tmp/qd-gates.XXXXXX)
EXTRA_DIRS="$EXTRA_DIRS $socks"
ngx="$work/nginx"
mkdir -p "$ngx/tmp"
cp "$QD_SRCDIR/deploy/nginx/qwen3d-gate.conf" "$ngx/"
NGINX_PORT=$("$NODE" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => {
  console.log(s.address().port); s.close(); });')
sed -e "s|^    listen 80;|    listen 127.0.0.1:$NGINX_PORT;|" \
  -e "s|192\.0\.2\.11:8080|127.0.0.1:$R_PORT_r1|" -e "s|192\.0\.2\.12:8080|127.0.0.1:$R_PORT_r2|" \
  -e "s|192\.0\.2\.13:8080|127.0.0.1:$R_PORT_r3|" -e "s|unix:/run/qwen3d-|unix:$socks/qwen3d-|" \
  "$QD_SRCDIR/deploy/nginx/qwen3d.conf" >"$ngx/qwen3d.conf"
# Every address was rewritten: nothing may point off this machine.
for want in "listen 127.0.0.1:$NGINX_PORT;" "127.0.0.1:$R_PORT_r1" "127.0.0.1:$R_PORT_r2" "127.0.0.1:$R_PORT_r3"; do
  grep -qF "$want" "$ngx/qwen3d.conf" || fail "the shipped nginx config changed shape: '$want' not written"
done
! grep -v '^ *#' "$ngx/qwen3d.conf" | grep -nE '192\.0\.2\.|/run/|listen 80' ||
  fail "an address of the shipped config was left"
# The workers run as this test's user (nginx ignores `user` when not root),
# so they reach the scratch folders.
cat >"$ngx/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 1;
pid $ngx/nginx.pid;
error_log $ngx/error.log info;
events { worker_connections 256; }
http {
    log_format qd '\$request_method \$uri \$status key=\$http_x_affinity_key upstream=\$upstream_addr upstream_status=\$upstream_status';
    access_log $ngx/access.log qd;
    client_body_temp_path $ngx/tmp/body;
    proxy_temp_path $ngx/tmp/proxy;
    fastcgi_temp_path $ngx/tmp/fastcgi;
    uwsgi_temp_path $ngx/tmp/uwsgi;
    scgi_temp_path $ngx/tmp/scgi;
    include qwen3d.conf;
}
CONF
"$NGINX" -t -p "$ngx" -c "$ngx/nginx.conf" >"$ngx/t.txt" 2>&1 || fail "nginx -t: $(cat "$ngx/t.txt")"
"$NGINX" -p "$ngx" -c "$ngx/nginx.conf" -g 'daemon off;' >"$ngx/out.txt" 2>&1 &
NGINX_PID=$!
EXTRA_PIDS="$EXTRA_PIDS $NGINX_PID"
NBASE="http://127.0.0.1:$NGINX_PORT"
answers() {
  alive "$NGINX_PID" || fail "nginx exited: $(cat "$ngx/out.txt" "$ngx/error.log" | tail -n 5)"
  [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$NBASE/v1/models")" = 200 ]
}
wait_until "nginx to answer on $NBASE" answers
[ "$(curl -s -o /dev/null -w '%{http_code}' "$NBASE/metrics")" = 404 ] || fail "/metrics is reachable through the balancer"

"$NODE" "$QD_SRCDIR/tests/deploy/lb-driver.js" "$NBASE" tiny \
  "r1:$R_PID_r1:$R_PORT_r1" "r2:$R_PID_r2:$R_PORT_r2" "r3:$R_PID_r3:$R_PORT_r3" >"$work/driver.txt" 2>&1 || {
  cat "$work/driver.txt"
  echo "--- nginx access log, last lines:"
  tail -n 30 "$ngx/access.log"
  fail "lb-driver.js: $(grep '^FAIL' "$work/driver.txt" | head -n 1)"
}
cat "$work/driver.txt"

# r1 was killed (its status is the kill's); r2 drained and exits 0.
PID=$R_PID_r1
serve_stop none
PID=$R_PID_r2
serve_stop none
[ "$STATUS" = 0 ] || fail "replica r2 exited $STATUS after SIGTERM"
grep -q 'event=drained' "$work/r2.log" || fail "replica r2 does not log its drain"
# nginx saw the dead replica as refused connections, and retried them.
grep 'Connection refused' "$ngx/error.log" | grep -q "upstream: \"http://127.0.0.1:$R_PORT_r1/" ||
  fail "nginx never found replica r1 gone"
echo "deploy_nginx: retries in the access log: $(grep -c 'upstream=[^ ]*, ' "$ngx/access.log")"
kill -QUIT "$NGINX_PID"
wait "$NGINX_PID" || true
echo "deploy_nginx: all checks passed"
rm -rf "$work"
