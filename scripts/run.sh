#!/usr/bin/env bash
# `make run`: build rustqueued (release) and run it in the foreground with the defaults
# (data in ./data, NSQ TCP on 0.0.0.0:4150, HTTP on 0.0.0.0:4151). Ctrl-C stops it cleanly.
# Any RUSTQUEUE_* variable (docs/configuration.md) or RUSTQUEUE_CONFIG=<file> still applies.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

log "building rustqueued (release)"
stamp_revision
cargo build --release -p rustqueue-server --bin rustqueued
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rustqueued"

# What the banner shows follows the same overrides the broker reads.
TCP_PORT="${RUSTQUEUE_TCP_ADDRESS:-0.0.0.0:4150}"; TCP_PORT="${TCP_PORT##*:}"
HTTP_PORT="${RUSTQUEUE_HTTP_ADDRESS:-0.0.0.0:4151}"; HTTP_PORT="${HTTP_PORT##*:}"
DATA="${RUSTQUEUE_DATA_PATH:-./data}"
PYNSQ="$(ls -d "$RUSTQUEUE_CACHE"/pynsq-*/bin/python 2>/dev/null | head -1 || true)"
NSQ_TAIL="$RUSTQUEUE_CACHE/nsqd-$NSQD_VERSION/bin/nsq_tail"
cat <<EOT

RustQueue broker starting: NSQ TCP 127.0.0.1:$TCP_PORT, HTTP 127.0.0.1:$HTTP_PORT, data in $DATA

Publish (any NSQ client works too):
  curl -d 'hello' 'http://127.0.0.1:$HTTP_PORT/pub?topic=test'

Consume with pynsq (${PYNSQ:-run 'scripts/deps.sh python' first}):
  ${PYNSQ:-python3} - <<'PY'
import nsq
def handler(message):
    print(message.body.decode())
    return True
nsq.Reader(message_handler=handler, nsqd_tcp_addresses=['127.0.0.1:$TCP_PORT'],
           topic='test', channel='tail', max_in_flight=10)
nsq.run()
PY

Or with nsq_tail, which reads from an ephemeral channel and so sees only what is published
after it starts (${NSQ_TAIL}; 'scripts/deps.sh nsqd' installs it):
  $NSQ_TAIL --nsqd-tcp-address=127.0.0.1:$TCP_PORT --topic=test

Stats: curl 'http://127.0.0.1:$HTTP_PORT/stats'      Stop: Ctrl-C

EOT
exec "$BIN" "$@"
