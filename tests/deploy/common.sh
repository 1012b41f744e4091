# Helpers of the tests/deploy_*.sh tests, on top of tests/serve/common.sh
# (sourced first): replicas started the way the template unit
# qwen3d@.service starts them, `qwen3d serve --config FILE` and nothing
# else, from configs written from deploy/qwen3d-replica.conf.example.

# replica_conf FILE [KEY=VALUE...]: the example with model = $MODEL,
# host = 127.0.0.1, port = 0 (any free port, read back from the log) and
# each KEY set to VALUE (replaced where the example sets it, else added).
replica_conf() {
  out=$1
  shift
  sed -e "s|^model = .*|model = $MODEL|" -e 's|^host = .*|host = 127.0.0.1|' -e 's|^port = .*|port = 0|' \
    "$QD_SRCDIR/deploy/qwen3d-replica.conf.example" >"$out"
  for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    if grep -q "^$k = " "$out"; then
      sed -i "s|^$k = .*|$k = $v|" "$out"
    else
      echo "$k = $v" >>"$out"
    fi
  done
}

# replica_start NAME CONF: starts `qwen3d serve --config CONF` and waits
# (bounded) for the model; sets PID, PORT, BASE and LOG like serve_start,
# and R_PID_NAME, R_PORT_NAME for later. replica_launch and replica_wait
# are its two halves, to start several replicas at once.
replica_start() {
  replica_launch "$@"
  replica_wait "$1"
}
replica_launch() {
  "$QWEN3D" serve --config "$2" >"$work/$1.out" 2>"$work/$1.log" &
  eval "R_PID_$1=$!"
  SERVE_PIDS="$SERVE_PIDS $!"
}
replica_wait() {
  LOG="$work/$1.log"
  eval "PID=\$R_PID_$1"
  serve_wait model_loaded 60
  eval "R_PORT_$1=$PORT"
}

# metric_is NAME VALUE: the one series of NAME in $BASE/metrics is VALUE.
metric_is() {
  [ "$(metric "$1")" = "$2" ]
}
