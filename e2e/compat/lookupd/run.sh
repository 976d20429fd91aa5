#!/usr/bin/env bash
# Lookup parity: the official clients (go-nsq Consumer.ConnectToNSQLookupd, pynsq
# Reader(lookupd_http_addresses=...), nsqjs Reader({lookupdHTTPAddresses})) find topics
# through a lookup service, with a ledger.
#
# Usage: e2e/compat/lookupd/run.sh <nsqlookupd|discovery> [go|python|node]...   (default: all)
#
#   nsqlookupd: official nsqlookupd v1.3.0 and two official nsqd (--lookupd-tcp-address)
#   discovery:  rustqueue-discovery in static mode (docs/discovery.md) and two rustqueued,
#               plus rustqueue-gateway in front of them (docs/gateway.md): every suite adds
#               the gateway-publish scenario (go-nsq Producers / pynsq and nsqjs Writers over
#               TCP and HTTP /pub, /mpub through the gateway; messages on both brokers;
#               consumed via lookup)
#
# Each client gets a fresh cluster on free 127.0.0.1 ports (its last scenario stops broker 2)
# and runs the scenarios discover, new-topic and broker-leaves; each prints PASS/FAIL and a
# `ledger <name>: published N received M missing K` line. This script ends each client with
#   compat-lookupd-<client>-<target>: N passed, M failed
# Before the first client, http_cases.py checks nsqlookupd's HTTP answers (status codes,
# error bodies, headers, with and without the Accept header) on the fresh cluster:
#   compat-lookupd-http-<target>: N passed, M failed
# and exits non-zero on any failure or any ledger with missing > 0.
#
# Env: RUSTQUEUED_BIN, DISCOVERY_BIN, GATEWAY_BIN (default $CARGO_TARGET_DIR/debug/...),
# COMPAT_KEEP=1.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../../scripts/lib.sh"

target="${1:-}"
case "$target" in nsqlookupd | discovery) shift ;; *) die "usage: $0 <nsqlookupd|discovery> [go|python]..." ;; esac
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(go python node)

NSQ_BIN="$RUSTQUEUE_CACHE/nsqd-$NSQD_VERSION/bin"
NSQLOOKUPD_BIN="$RUSTQUEUE_CACHE/nsqlookupd-$NSQLOOKUPD_VERSION/bin/nsqlookupd"
PY="${COMPAT_PY:-$RUSTQUEUE_CACHE/pynsq-$PYNSQ_VERSION-tornado-$TORNADO_VERSION/bin/python}"
NODE_MODULES="$RUSTQUEUE_CACHE/nsqjs-$NSQJS_VERSION/node_modules"
BIN_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
RUSTQUEUED_BIN="${RUSTQUEUED_BIN:-$BIN_DIR/rustqueued}"
DISCOVERY_BIN="${DISCOVERY_BIN:-$BIN_DIR/rustqueue-discovery}"
GATEWAY_BIN="${GATEWAY_BIN:-$BIN_DIR/rustqueue-gateway}"
GW_TCP="" GW_HTTP=""

WORK_PREFIX="rq-lookupd-$target"
source "$HERE/../lib/procs.sh"

# A cluster: LOOKUP (HTTP), broker 1 and 2 (B1_TCP/B1_HTTP, B2_TCP/B2_HTTP), PID_b2.
start_nsqlookupd() {
  local dir="$1" ltcp
  ltcp="127.0.0.1:$(free_port)" LOOKUP="127.0.0.1:$(free_port)"
  start lookup "$NSQLOOKUPD_BIN" --tcp-address="$ltcp" --http-address="$LOOKUP" \
    --broadcast-address=127.0.0.1 --log-level=warn
  wait_http lookup "$LOOKUP"
  local n
  for n in 1 2; do
    local tcp="127.0.0.1:$(free_port)" http="127.0.0.1:$(free_port)"
    mkdir -p "$dir/data-$n"
    start "b$n" "$NSQ_BIN/nsqd" --tcp-address="$tcp" --http-address="$http" \
      --broadcast-address=127.0.0.1 --data-path="$dir/data-$n" --log-level=warn \
      --lookupd-tcp-address="$ltcp"
    eval "B${n}_TCP=$tcp B${n}_HTTP=$http"
  done
}

start_discovery() {
  local dir="$1" n
  for n in 1 2; do
    local tcp="127.0.0.1:$(free_port)" http="127.0.0.1:$(free_port)"
    cat >"$dir/b$n.toml" <<EOT
[node]
id = $n
broadcast_address = "127.0.0.1"

[network]
tcp_address = "$tcp"
http_address = "$http"

[storage]
data_path = "$dir/data-$n"
# The test machine's free disk must not throttle publishing.
disk_high_watermark_percent = 100
disk_low_watermark_percent = 99
min_free_bytes = 1
EOT
    start "b$n" env RUST_LOG="${RUST_LOG:-warn}" "$RUSTQUEUED_BIN" --config "$dir/b$n.toml"
    eval "B${n}_TCP=$tcp B${n}_HTTP=$http"
  done
  LOOKUP="127.0.0.1:$(free_port)"
  start lookup env RUST_LOG="${RUST_LOG:-warn}" "$DISCOVERY_BIN" --address "$LOOKUP" \
    --static-brokers "$B1_HTTP,$B2_HTTP"
  wait_http lookup "$LOOKUP"
  # Serving lookups once its first poll of the brokers succeeded (503 before, fail closed).
  local i
  for i in $(seq 1 100); do
    curl -fsS -o /dev/null "http://$LOOKUP/v1/health" 2>/dev/null && return 0
    sleep 0.1
  done
  curl -sS "http://$LOOKUP/v1/health" >&2 || true
  die "rustqueue-discovery did not become ready within 10 s"
}

# The producer gateway in front of the cluster, fed by the discovery service; ready once it
# agreed on both brokers (/v1/health 200 with "brokers":2).
start_gateway() {
  GW_TCP="127.0.0.1:$(free_port)" GW_HTTP="127.0.0.1:$(free_port)"
  start gateway env RUST_LOG="${RUST_LOG:-warn}" "$GATEWAY_BIN" --tcp-address "$GW_TCP" \
    --http-address "$GW_HTTP" --discovery-urls "http://$LOOKUP"
  wait_http gateway "$GW_HTTP"
  local i
  for i in $(seq 1 100); do
    curl -fsS "http://$GW_HTTP/v1/health" 2>/dev/null | grep -q '"brokers":2' && return 0
    sleep 0.1
  done
  curl -sS "http://$GW_HTTP/v1/health" >&2 || true
  die "rustqueue-gateway did not see both brokers within 10 s"
}

check_tools() {
  if [ "$target" = nsqlookupd ]; then
    [ -x "$NSQLOOKUPD_BIN" ] || die "no nsqlookupd at $NSQLOOKUPD_BIN: run scripts/deps.sh nsqlookupd"
    [ -x "$NSQ_BIN/nsqd" ] || die "no nsqd in $NSQ_BIN: run scripts/deps.sh nsqd"
  else
    [ -x "$RUSTQUEUED_BIN" ] || die "no rustqueued at $RUSTQUEUED_BIN: cargo build -p rustqueue-server"
    [ -x "$DISCOVERY_BIN" ] || die "no rustqueue-discovery at $DISCOVERY_BIN: cargo build -p rustqueue-discovery"
    [ -x "$GATEWAY_BIN" ] || die "no rustqueue-gateway at $GATEWAY_BIN: cargo build -p rustqueue-gateway"
  fi
  local c
  for c in "${clients[@]}"; do
    case "$c" in
      go) command -v go >/dev/null || die "go is not installed" ;;
      python) [ -x "$PY" ] || die "no pynsq venv at $PY: run scripts/deps.sh python" ;;
      node) [ -d "$NODE_MODULES/nsqjs" ] || die "no nsqjs in $NODE_MODULES: run scripts/deps.sh node" ;;
      *) die "unknown client '$c' (expected: go python node)" ;;
    esac
  done
}

main() {
  check_tools
  if [[ " ${clients[*]} " == *" go "* ]]; then
    GO_BIN="$RUSTQUEUE_CACHE/compat-go/lookupd-go"
    log "building the go-nsq lookup suite (go build cache)"
    (cd "$HERE/go" && go build -o "$GO_BIN" .)
  fi
  local failed_any=0 client out pass fail rc http_done=0
  for client in "${clients[@]}"; do
    local dir="$WORK/$client"
    mkdir -p "$dir"
    "start_$target" "$dir"
    wait_http b1 "$B1_HTTP"
    wait_http b2 "$B2_HTTP"
    if [ "$http_done" = 0 ]; then
      # nsqlookupd's HTTP answers, on the fresh cluster (no topics yet).
      http_done=1 rc=0
      python3 "$HERE/http_cases.py" "$LOOKUP" >"$WORK/http.out" || rc=$?
      grep '^FAIL' "$WORK/http.out" || true
      pass=$(grep -c '^PASS ' "$WORK/http.out" || true)
      fail=$(grep -c '^FAIL ' "$WORK/http.out" || true)
      [ "$rc" = 0 ] && [ "$pass" -gt 0 ] || fail=$((fail + 1))
      echo "compat-lookupd-http-$target: $pass passed, $fail failed"
      [ "$fail" = 0 ] || failed_any=1
    fi
    log "$target lookup=$LOOKUP b1=$B1_TCP/$B1_HTTP b2=$B2_TCP/$B2_HTTP ($client)"
    local args=(--lookup "$LOOKUP" --b1-tcp "$B1_TCP" --b1-http "$B1_HTTP"
      --b2-tcp "$B2_TCP" --b2-http "$B2_HTTP" --leave-pid "$PID_b2")
    if [ "$target" = discovery ]; then
      start_gateway
      log "gateway tcp=$GW_TCP http=$GW_HTTP"
      args+=(--gateway-tcp "$GW_TCP" --gateway-http "$GW_HTTP")
    fi
    out="$WORK/$client.out"
    rc=0
    case "$client" in
      go) "$GO_BIN" "${args[@]}" 2>"$WORK/$client.stderr" | tee "$out" || rc=$? ;;
      python) "$PY" "$HERE/python/lookup.py" "${args[@]}" 2>"$WORK/$client.stderr" | tee "$out" || rc=$? ;;
      node) NODE_PATH="$NODE_MODULES" node "$HERE/node/lookup.js" "${args[@]}" 2>"$WORK/$client.stderr" | tee "$out" || rc=$? ;;
    esac
    pass=$(grep -c '^PASS ' "$out" || true)
    fail=$(grep -c '^FAIL ' "$out" || true)
    if grep -Eq '^ledger .* missing [1-9]' "$out"; then fail=$((fail + 1)); fi
    if [ "$rc" != 0 ] && [ "$fail" = 0 ]; then
      echo "FAIL suite: the $client suite exited $rc without a failing scenario"
      tail -n 20 "$WORK/$client.stderr" | sed 's/^/    | /'
      fail=1
    fi
    [ "$pass" -gt 0 ] || fail=$((fail + 1))
    echo "compat-lookupd-$client-$target: $pass passed, $fail failed"
    [ "$fail" = 0 ] || failed_any=1
    if ! kill -0 "$PID_b1" 2>/dev/null || ! kill -0 "$PID_lookup" 2>/dev/null; then
      echo "broker 1 or the lookup service died during the run:"
      tail -n 20 "$WORK/b1.log" "$WORK/lookup.log"
      failed_any=1
    fi
    if [ -n "$GW_TCP" ] && ! kill -0 "$PID_gateway" 2>/dev/null; then
      echo "the gateway died during the run:"
      tail -n 20 "$WORK/gateway.log"
      failed_any=1
    fi
    GW_TCP="" GW_HTTP=
    stop_all
  done
  return "$failed_any"
}

main
