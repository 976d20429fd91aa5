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
