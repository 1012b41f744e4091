#!/bin/sh
# `qwen3d serve` scraped by a real Prometheus server (Debian's `prometheus`,
# installed by deploy/install-deps.sh --test; the test fails without it):
#  - `promtool check config` accepts the generated configuration, which
#    scrapes the daemon's /metrics on loopback every second, with the
#    storage in the build tree and the web API on a free loopback port;
#  - tests/serve/prom-check.js sends a known set of requests (completions
#    and chat, streaming or not, and failures), waits for a scrape after the
#    last one and requires Prometheus' /api/v1/query answers for
#    requests_total by endpoint and code, prompt and generation tokens,
#    request_finished_total by finished_reason, the per-request token
#    histograms (model_name label) and
#    the histogram counts to equal what the clients counted from `usage`;
#  - `promtool check metrics` accepts a scrape of the daemon after that
#    traffic (this is the one place the exposition meets promtool).
NAME=serve_prom
. "$QD_SRCDIR/tests/serve/common.sh"

for tool in prometheus promtool; do
  command -v $tool >/dev/null 2>&1 ||
    fail "'$tool' is not installed: this test needs Debian's prometheus package (deploy/install-deps.sh --test installs it)"
done

serve_model
serve_start --parallel 2

# The Prometheus server: a generated config, storage under $work, the web
# API on a free loopback port (picked, then bound by Prometheus: on the rare
# lost race the start is retried on another port).
JOB=qwen3d
cat >"$work/prometheus.yml" <<CONF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: $JOB
    metrics_path: /metrics
    static_configs:
      - targets: ['127.0.0.1:$PORT']
CONF
promtool check config "$work/prometheus.yml" >"$work/promtool-config.txt" 2>&1 ||
  fail "promtool check config: $(cat "$work/promtool-config.txt")"

free_port() {
  "$NODE" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => {
    console.log(s.address().port); s.close(); });'
}
PROM_PID=
for attempt in 1 2 3; do
  PROM_PORT=$(free_port)
  PROM="http://127.0.0.1:$PROM_PORT"
  PROM_LOG="$work/prometheus.$attempt.log"
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom-data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$PROM_LOG" 2>&1 &
  PROM_PID=$!
  EXTRA_PIDS="$PROM_PID"
  i=0
  while alive "$PROM_PID" && [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$PROM/-/ready")" != 200 ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "Prometheus was not ready within 30 s: $(tail -n 5 "$PROM_LOG")"
    sleep 0.1
  done
  alive "$PROM_PID" && break
  wait "$PROM_PID" || true
  PROM_PID=
done
[ -n "$PROM_PID" ] || fail "Prometheus did not start: $(tail -n 5 "$PROM_LOG")"
echo "prometheus $(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f3) on $PROM scrapes $BASE/metrics"

"$NODE" "$scripts/prom-check.js" "$BASE" "$PROM" tiny "$JOB" ||
  fail "prom-check.js; Prometheus' log: $(tail -n 5 "$PROM_LOG")"

curl -s -m 10 "$BASE/metrics" >"$work/metrics.txt" || fail "GET /metrics"
promtool check metrics <"$work/metrics.txt" >"$work/promtool.txt" 2>&1 ||
  fail "promtool check metrics: $(cat "$work/promtool.txt")"
echo "promtool check metrics: ok"

kill -TERM "$PROM_PID"
i=0
while alive "$PROM_PID"; do
  i=$((i + 1))
  [ $i -lt 200 ] || fail "Prometheus did not exit within 20 s of SIGTERM"
  sleep 0.1
done
wait "$PROM_PID" || true
EXTRA_PIDS=
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM"
echo "serve_prom: all checks passed"
rm -rf "$work"
