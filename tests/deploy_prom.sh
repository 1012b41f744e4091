#!/bin/sh
# deploy/prometheus/ (promtool from Debian's prometheus package, installed
# by deploy/install-deps.sh --test; the test fails without it):
#  - `promtool check config` accepts prometheus.yml and the rule files it
#    names, `promtool check rules` each rule file;
#  - `promtool test rules` runs qwen3d-rules.test.yml: every recording rule
#    against known rates and buckets, every alert firing and not firing;
#  - every metric the rules, the alerts and the Kubernetes adapter rule
#    read is one the daemon exports (a scrape of a replica), except those
#    design.md names that the daemon does not export yet, which are listed.
NAME=deploy_prom
. "$QD_SRCDIR/tests/serve/common.sh"

command -v promtool >/dev/null 2>&1 ||
  fail "promtool is not installed: this test needs Debian's prometheus package (deploy/install-deps.sh --test)"
prom="$QD_SRCDIR/deploy/prometheus"

promtool check config "$prom/prometheus.yml" >"$work/config.txt" 2>&1 ||
  fail "promtool check config: $(cat "$work/config.txt")"
promtool check rules "$prom/qwen3d-rules.yml" "$prom/qwen3d-alerts.yml" >"$work/rules.txt" 2>&1 ||
  fail "promtool check rules: $(cat "$work/rules.txt")"
(cd "$prom" && promtool test rules qwen3d-rules.test.yml) >"$work/test.txt" 2>&1 ||
  fail "promtool test rules: $(cat "$work/test.txt")"
# Every rule and alert has a test.
for r in $(sed -n 's/^ *- \(record\|alert\): *\([^ ]*\)$/\2/p' "$prom/qwen3d-rules.yml" "$prom/qwen3d-alerts.yml"); do
  grep -q "$r" "$prom/qwen3d-rules.test.yml" || fail "no promtool test reads '$r'"
done
echo "deploy_prom: promtool check config, check rules and test rules pass ($(grep -c '^ *- \(record\|alert\):' \
  "$prom/qwen3d-rules.yml" "$prom/qwen3d-alerts.yml" | awk -F: '{ s += $2 } END { print s }') rules and alerts)"

# The metric names against a live replica.
serve_model
serve_start
curl -s -m 10 "$BASE/metrics" >"$work/metrics.txt"
serve_stop
# Named in design.md section 3, not exported by this daemon yet.
pending="qwen3d_kv_cache_usage_ratio"
n=0
for m in $(cat "$prom/qwen3d-rules.yml" "$prom/qwen3d-alerts.yml" "$QD_SRCDIR/deploy/k8s/prometheus-adapter.yaml" |
  grep -v '^ *#' | grep -oE '(^|[^:a-z_])(qwen3d|process)_[a-z_]*' | sed 's/^[^a-z]//' | sort -u); do
  family=$(echo "$m" | sed 's/_\(bucket\|count\|sum\)$//')
  n=$((n + 1))
  if grep -q "^# TYPE $family " "$work/metrics.txt"; then
    continue
  fi
  case " $pending " in
    *" $family "*) echo "deploy_prom: $family (design.md) is not exported yet; its alert is tested by promtool only" ;;
    *) fail "the rules read $m, which the daemon does not export" ;;
  esac
done
[ $n -ge 7 ] || fail "only $n metric names found in the rules"
echo "deploy_prom: the $n metrics the rules read are exported by the daemon or listed above"
echo "deploy_prom: all checks passed"
rm -rf "$work"
