#!/bin/sh
# Placement of replicas (--cpus, --numa-node), black-box on the tiny model:
#  - bad placements are refused with one line on stderr and exit status 2,
#    by serve (options and config keys), generate, bench and inspect;
#  - two replicas run as the template unit qwen3d@.service runs them
#    (`qwen3d serve --config NAME.conf`, configs from
#    deploy/qwen3d-replica.conf.example with numa-node = 0 and one CPU each):
#    every thread of each is bound to its own CPU (/proc/PID/task/*/status
#    Cpus_allowed_list, and hwloc-bind --get --pid), the two sets are
#    disjoint, the compute threads last ran there, the start log states the
#    binding with memory bound to the node, and both stream completions at
#    the same time. systemd itself cannot run here (it is not PID 1): the
#    daemons are started with exactly the command line the unit gives them.
NAME=deploy_placement
. "$QD_SRCDIR/tests/serve/common.sh"
. "$QD_SRCDIR/tests/deploy/common.sh"

serve_model

# one_error CMD...: the command fails with status 2 and one line on stderr.
one_error() {
  st=0
  "$@" >"$work/err.out" 2>"$work/err.txt" || st=$?
  [ "$st" = 2 ] || fail "'$*' exited $st (want 2): $(cat "$work/err.txt")"
  [ "$(wc -l <"$work/err.txt")" = 1 ] || fail "'$*' printed more than one error line: $(cat "$work/err.txt")"
  grep -qF -- "$EXPECT" "$work/err.txt" || fail "'$*': '$(cat "$work/err.txt")' does not say '$EXPECT'"
}
EXPECT="--cpus '0-99999': CPU numbers go up to" one_error "$QWEN3D" serve --model "$MODEL" --cpus 0-99999
EXPECT="expected a CPU list" one_error "$QWEN3D" serve --model "$MODEL" --cpus 0,,1
EXPECT="--cpus '0,4000': CPUs 4000 are not available here" one_error "$QWEN3D" serve --model "$MODEL" --cpus 0,4000
EXPECT="--numa-node 4000: no such NUMA node" one_error "$QWEN3D" serve --model "$MODEL" --numa-node 4000
EXPECT="--numa-node must be an integer" one_error "$QWEN3D" serve --model "$MODEL" --numa-node x
replica_conf "$work/bad.conf" cpus=1-0
EXPECT="the range 1-0 is backwards" one_error "$QWEN3D" serve --config "$work/bad.conf"
EXPECT="expected a CPU list" one_error "$QWEN3D" generate --model "$MODEL" --prompt-ids 1,2 --cpus x
EXPECT="expected a CPU list" one_error "$QWEN3D" bench --model "$MODEL" --cpus 1-
EXPECT="no such NUMA node" one_error "$QWEN3D" inspect --model "$MODEL" --numa-node 4000
echo "deploy_placement: bad CPU lists and NUMA nodes get one error line, exit 2"

# Two CPUs this test may use, one per replica.
cpus=$("$NODE" -e '
  const l = require("fs").readFileSync("/proc/self/status", "utf8").match(/^Cpus_allowed_list:\s*(\S+)/m)[1];
  const c = [];
  for (const r of l.split(",")) { const [a, b] = r.split("-").map(Number); for (let i = a; i <= (b ?? a); i++) c.push(i); }
  console.log(c.slice(0, 2).join(" "));')
set -- $cpus
[ $# = 2 ] || skip "two CPUs are needed to pin two replicas apart; this process may use $cpus"
CPU_A=$1 CPU_B=$2

"$QWEN3D" inspect --model "$MODEL" --numa-node 0 --cpus "$CPU_B" >"$work/inspect.txt" ||
  fail "inspect --numa-node 0 --cpus $CPU_B"
grep -q "^placement: cpus $CPU_B (1 core), memory bound to NUMA nodes 0$" "$work/inspect.txt" ||
  fail "inspect does not state the binding: $(grep placement "$work/inspect.txt")"

# drain-delay 0: the not-ready period only slows these stops down.
replica_conf "$work/a.conf" cpus="$CPU_A" drain-delay=0
replica_conf "$work/b.conf" cpus="$CPU_B" drain-delay=0
grep -q '^numa-node = 0$' "$work/a.conf" || fail "the replica example no longer sets numa-node"
replica_start a "$work/a.conf"
replica_start b "$work/b.conf"

# cpus_of PID: the union of its threads' Cpus_allowed_list, one per line, sorted.
threads_cpus() {
  for t in /proc/$1/task/*; do
    sed -n 's/^Cpus_allowed_list:\s*//p' "$t/status" 2>/dev/null
  done | sort -u
}
check_replica() { # NAME PID CPU
  grep -q "event=placement cpus=$3 cores=1 membind=bind numa_nodes=0" "$work/$1.log" ||
    fail "replica $1: the log does not state the binding to CPU $3: $(grep placement "$work/$1.log")"
  grep -q 'event=model_loaded .* threads=1 ' "$work/$1.log" || fail "replica $1: not one compute thread per core"
  got=$(threads_cpus "$2")
  [ "$got" = "$3" ] || fail "replica $1: its threads may run on '$got', not only CPU $3"
  mask=$(hwloc-bind --get --pid "$2") || fail "hwloc-bind --get --pid $2"
  pus=$(hwloc-calc --physical-output -I pu "$mask") || fail "hwloc-calc $mask"
  [ "$pus" = "$3" ] || fail "replica $1: hwloc-bind --get says $mask (CPUs $pus), want CPU $3"
  echo "deploy_placement: replica $1 (pid $2) Cpus_allowed_list $(sed -n 's/^Cpus_allowed_list:\s*//p' /proc/$2/status), hwloc-bind --get $mask"
}
check_replica a "$R_PID_a" "$CPU_A"
check_replica b "$R_PID_b" "$CPU_B"
[ "$CPU_A" != "$CPU_B" ] || fail "the two CPU sets overlap"

# Both stream at once.
for r in a b; do
  eval port=\$R_PORT_$r
  curl -s -N -m 60 -o "$work/stream.$r" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"model":"tiny","prompt":"Two replicas","max_tokens":64,"temperature":0,"stream":true}' \
    "http://127.0.0.1:$port/v1/completions" >"$work/code.$r" &
  curls="${curls:-} $!"
done
for c in $curls; do wait "$c" || true; done
for r in a b; do
  [ "$(cat "$work/code.$r")" = 200 ] || fail "replica $r answered $(cat "$work/code.$r")"
  [ "$(tail -n 2 "$work/stream.$r" | head -n 1)" = 'data: [DONE]' ] || fail "replica $r: the stream did not end with [DONE]"
done
# The compute thread of each last ran on its CPU (field 39 of its stat).
for r in a b; do
  eval pid=\$R_PID_$r
  [ "$r" = a ] && cpu=$CPU_A || cpu=$CPU_B
  for t in /proc/$pid/task/*; do
    [ "$(cat "$t/comm")" = qwen3d-compute ] || continue
    last=$(sed 's/.*) //' "$t/stat" | cut -d' ' -f37)
    [ "$last" = "$cpu" ] || fail "replica $r: the compute thread last ran on CPU $last, not $cpu"
  done
done
echo "deploy_placement: replicas on CPU $CPU_A and CPU $CPU_B streamed at the same time"
for r in a b; do
  eval PID=\$R_PID_$r
  serve_stop
  [ "$STATUS" = 0 ] || fail "replica $r exited $STATUS after SIGTERM"
done
echo "deploy_placement: all checks passed"
rm -rf "$work"
