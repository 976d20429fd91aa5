# Process helpers shared by the compat harnesses (e2e/compat/run.sh, e2e/compat/lookupd/run.sh).
# Source after scripts/lib.sh with WORK_PREFIX set: it makes $WORK (kept with COMPAT_KEEP=1) and
# stops every process `start` ran when the script exits.

WORK="$(mktemp -d "${TMPDIR:-/tmp}/$WORK_PREFIX.XXXXXX")"
PIDS=()

# stop_all: stop (and reap) every process started so far.
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

cleanup() {
  stop_all
  if [ "${COMPAT_KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start NAME CMD...: run CMD in the background with its output in $WORK/NAME.log and its pid
# in PID_NAME (dashes in NAME become underscores).
start() {
  local name="$1"
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_${name//-/_}=$!"
}

# wait_http NAME URL: poll URL/ping until it answers, failing early if NAME died. A bare
# host:port means http://. Extra curl arguments (e.g. a CA and a client certificate for
# https:// URLs) come from the WAIT_HTTP_CURL array.
WAIT_HTTP_CURL=()
wait_http() {
  local name="$1" addr="$2" pidvar="PID_${1//-/_}" i
  [[ "$addr" == *://* ]] || addr="http://$addr"
  for i in $(seq 1 200); do
    if curl -fsS -o /dev/null "${WAIT_HTTP_CURL[@]}" "$addr/ping" 2>/dev/null; then return 0; fi
    if ! kill -0 "${!pidvar}" 2>/dev/null; then
      tail -n 30 "$WORK/$name.log" >&2
      die "$name exited before answering on $addr"
    fi
    sleep 0.1
  done
  tail -n 30 "$WORK/$name.log" >&2
  die "$name did not answer on $addr/ping within 20 s"
}
