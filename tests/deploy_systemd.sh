#!/bin/sh
# The systemd units of deploy/ (systemd-analyze from Debian's systemd
# package, installed by deploy/install-deps.sh --test; the test fails
# without it):
#  - `systemd-analyze verify` accepts qwen3d.service, the template
#    qwen3d@.service and an instance of it (qwen3d@node0.service), with the
#    binary path rewritten as `make install` does, and prints nothing:
#    verify exits 0 on an unknown or misspelled directive, so any output
#    fails the test;
#  - `systemd-analyze security --offline=true` rates each unit 2.0 or lower;
#  - both units carry the same sandbox block, so they cannot drift apart;
#  - the daemon starts and serves under the /proc that ProtectProc=invisible
#    and ProcSubset=pid give it (a private /proc mounted with
#    hidepid=invisible,subset=pid in new mount and PID namespaces, as systemd
#    does): hwloc finds the cores without /proc/cpuinfo, --cpus binds, and
#    /metrics reads /proc/self/statm. The other sandbox directives need
#    systemd as PID 1 and are checked only by verify and security here.
NAME=deploy_systemd
. "$QD_SRCDIR/tests/serve/common.sh"

command -v systemd-analyze >/dev/null 2>&1 ||
  fail "systemd-analyze is not installed: this test needs Debian's systemd package (deploy/install-deps.sh --test)"

units="$work/units"
mkdir -p "$units"
for u in qwen3d.service qwen3d@.service; do
  sed -e "s|/usr/local/bin/qwen3d|$QWEN3D|g" "$QD_SRCDIR/deploy/$u" >"$units/$u"
done
ln -s qwen3d@.service "$units/qwen3d@node0.service"

for u in qwen3d.service qwen3d@.service qwen3d@node0.service; do
  (cd "$units" && systemd-analyze verify "$units/$u") >"$work/verify.txt" 2>&1 ||
    fail "systemd-analyze verify $u: $(cat "$work/verify.txt")"
  [ ! -s "$work/verify.txt" ] || fail "systemd-analyze verify $u complains: $(cat "$work/verify.txt")"
done
echo "deploy_systemd: systemd-analyze verify accepts qwen3d.service, qwen3d@.service and qwen3d@node0.service"

for u in qwen3d.service qwen3d@.service; do
  systemd-analyze security --offline=true "$units/$u" >"$work/security.txt" 2>&1 ||
    fail "systemd-analyze security $u: $(tail -n 5 "$work/security.txt")"
  score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p' "$work/security.txt")
  [ -n "$score" ] || fail "no exposure level in: $(tail -n 3 "$work/security.txt")"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
    fail "$u: exposure $score is above 2.0: $(grep '✗' "$work/security.txt")"
  echo "deploy_systemd: $u exposure $score (at most 2.0)"
done

block() { sed -n '/^# --- sandbox/,/^# --- end of sandbox/p' "$1" | sed 1d; }
block "$QD_SRCDIR/deploy/qwen3d.service" >"$work/block1"
block "$QD_SRCDIR/deploy/qwen3d@.service" >"$work/block2"
[ "$(wc -l <"$work/block1")" -gt 20 ] || fail "qwen3d.service has no sandbox block"
cmp -s "$work/block1" "$work/block2" ||
  fail "the sandbox blocks of qwen3d.service and qwen3d@.service differ: $(diff "$work/block1" "$work/block2")"

# ProtectProc=invisible and ProcSubset=pid, as systemd mounts them.
unshare -mpf --propagation private true 2>"$work/unshare.txt" ||
  fail "cannot create mount and PID namespaces (unshare): $(cat "$work/unshare.txt")"
serve_model
cpu=$(sed -n 's/^Cpus_allowed_list:\s*\([0-9]*\).*/\1/p' /proc/self/status)
LOG="$work/sandboxed.log"
unshare -mpf --propagation private sh -c '
  mount -t proc -o hidepid=invisible,subset=pid proc /proc || exit 99
  [ ! -e /proc/cpuinfo ] || exit 98
  exec "$0" serve --model "$1" --host 127.0.0.1 --port 0 --cpus "$2" --drain-delay 0' \
  "$QWEN3D" "$MODEL" "$cpu" >"$work/sandboxed.out" 2>"$LOG" &
UNSHARE=$!
EXTRA_PIDS="$EXTRA_PIDS $UNSHARE"
# The daemon is unshare's child (PID 1 of its namespace): signals go to it.
i=0
PID=
while [ -z "$PID" ]; do
  PID=$(cat "/proc/$UNSHARE/task/$UNSHARE/children" 2>/dev/null | cut -d' ' -f1)
  i=$((i + 1))
  [ $i -lt 100 ] || fail "unshare started no child: $(cat "$work/sandboxed.out" "$LOG")"
  [ -n "$PID" ] || sleep 0.1
done
SERVE_PIDS="$SERVE_PIDS $PID"
serve_wait model_loaded 30
grep -q "event=placement cpus=$cpu cores=1 membind=bind" "$LOG" ||
  fail "no binding to CPU $cpu under the restricted /proc: $(grep placement "$LOG")"
[ "$(http GET /health)" = 200 ] || fail "/health under the restricted /proc"
rss=$(metric process_resident_memory_bytes)
awk -v r="${rss:-0}" 'BEGIN { exit !(r > 0) }' || fail "process_resident_memory_bytes is '$rss' under the restricted /proc"
kill -TERM "$PID"
PID=$UNSHARE
serve_stop none # unshare exits with the daemon's status
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM under the restricted /proc"
echo "deploy_systemd: serves under /proc hidepid=invisible,subset=pid, bound to CPU $cpu, rss $rss bytes"
echo "deploy_systemd: all checks passed"
rm -rf "$work"
