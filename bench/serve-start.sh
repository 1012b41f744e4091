# Sourced by the bench scripts that run `qwen3d serve` from a build tree.
#
# bench_serve_start LOG PATH ARGS...: starts `./qwen3d serve --port 0
# --drain-delay 0 ARGS...` with its stderr in LOG and waits, up to 10
# minutes (a 4b model packs for a while), until GET PATH answers 2xx; sets
# SERVE_PID and SERVE_PORT. Prints the log and exits 1 when the daemon
# exits or never answers.
bench_serve_start() {
  _log=$1 _path=$2
  shift 2
  ./qwen3d serve --port 0 --drain-delay 0 "$@" 2>"$_log" &
  SERVE_PID=$!
  SERVE_PORT=
  for _ in $(seq 1 600); do
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$_log" >&2; exit 1; }
    SERVE_PORT=$(sed -n 's/.*event=listening .*port=\([0-9]*\).*/\1/p' "$_log")
    [ -n "$SERVE_PORT" ] && curl -sf "http://127.0.0.1:$SERVE_PORT$_path" >/dev/null && return 0
    sleep 1
  done
  cat "$_log" >&2
  exit 1
}
