#!/bin/sh
# deploy/k8s/ against the Kubernetes API schemas (tests/deploy/k8s-validate.mjs,
# with the npm packages kubernetes-models, whose validators are compiled
# from the Kubernetes OpenAPI schemas, and typescript, which rejects fields
# the API types do not have):
#  - every manifest validates, and the deployment's own facts hold:
#    Guaranteed QoS in whole CPUs, probes on /health/live and
#    /health/ready, a grace period longer than preStop plus the drain, the
#    model mounted read-only, matching selectors, the HPA's metric served
#    by the adapter rule;
#  - the validator fails on a misspelled field, a wrong type and an
#    unknown field (copies of the manifests with one fault each);
#  - the daemon accepts the config file of the ConfigMap (it starts with it,
#    model, host and port overridden on the command line).
NAME=deploy_k8s
. "$QD_SRCDIR/tests/serve/common.sh"

k8s="$QD_SRCDIR/deploy/k8s"
validate() {
  "$NODE" "$QD_SRCDIR/tests/deploy/k8s-validate.mjs" "$QD_NPM_DIR" "$work" "$@"
}
validate --qwen3d "$k8s"/*.yaml >"$work/valid.txt" 2>&1 || {
  cat "$work/valid.txt"
  fail "the manifests of deploy/k8s do not validate"
}
cat "$work/valid.txt"

# Faults the validator must find: "FILE|SED|WORDS THE PROBLEM MUST CONTAIN".
mkdir -p "$work/bad"
while IFS='|' read -r file edit want; do
  sed "$edit" "$k8s/$file" >"$work/bad/$file"
  ! cmp -s "$work/bad/$file" "$k8s/$file" || fail "the fault '$edit' changed nothing in $file"
  ! validate "$work/bad/$file" >"$work/bad.txt" 2>&1 || fail "the validator accepts $file with '$edit'"
  grep -q "PROBLEM: .*$want" "$work/bad.txt" || fail "$file with '$edit': $(cat "$work/bad.txt")"
done <<'FAULTS'
deployment.yaml|s/terminationGracePeriodSeconds:/terminationGracePeriodSecond:/|'"terminationGracePeriodSecond"' does not exist
deployment.yaml|s/replicas: 2/replicas: two/|spec/replicas must be integer
pdb.yaml|s/^  maxUnavailable: 1/  maxUnavailable: 1\n  maxUnavailabel: 1/|'"maxUnavailabel"' does not exist
hpa.yaml|s/averageValue: "4"/averageValue: [4]/|averageValue
FAULTS
echo "deploy_k8s: the validator rejects a misspelled field, a wrong type and an unknown field"

# The daemon reads the ConfigMap's qwen3d.conf.
"$NODE" -e '
  const YAML = require(process.argv[1] + "/node_modules/yaml");
  const d = YAML.parse(require("fs").readFileSync(process.argv[2], "utf8"));
  process.stdout.write(d.data["qwen3d.conf"]);' "$QD_NPM_DIR" "$k8s/configmap.yaml" >"$work/qwen3d.conf"
[ -s "$work/qwen3d.conf" ] || fail "no qwen3d.conf in configmap.yaml"
serve_model
serve_start --config "$work/qwen3d.conf"
[ "$(http GET /health)" = 200 ] || fail "the daemon with the ConfigMap's config does not serve"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
echo "deploy_k8s: the daemon starts with the ConfigMap's qwen3d.conf"
echo "deploy_k8s: all checks passed"
rm -rf "$work"
