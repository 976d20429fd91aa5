#!/usr/bin/env bash
# Official-client compatibility matrix: runs the go-nsq, pynsq and nsqjs suites
# against one server, official nsqd or rustqueued.
#
# Usage: e2e/compat/run.sh <nsqd|rustqueued> [go|python|node]...   (default: all three)
#
# Starts, on free 127.0.0.1 ports with temporary data dirs: a small nsqd-style auth server,
# TLS material (test CA, server, client and a rogue client certificate), a plain broker (TLS
# optional) and a secure broker (TLS required + mTLS + AUTH); nsqd also gets an nsqlookupd
# for the lookup scenario (rustqueued serves /lookup itself). Each suite prints one
# PASS/FAIL line per scenario; this script ends each client with
#   compat-<client>-<target>: N passed, M failed
# and exits non-zero on any failure. Everything it started is stopped on exit.
#
# Env: RUSTQUEUED_BIN (default $CARGO_TARGET_DIR/debug/rustqueued, else target/debug),
#      COMPAT_RESULTS_DIR (copy of each suite's output, for docs/compatibility.md),
#      COMPAT_KEEP=1 (keep the temp dir with logs), COMPAT_RUN=<regexp> (scenario filter),
#      RUST_LOG (rustqueued's log filter; default: warnings, and why each connection was closed).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../scripts/lib.sh"

target="${1:-}"
case "$target" in nsqd | rustqueued) shift ;; *) die "usage: $0 <nsqd|rustqueued> [go|python|node]..." ;; esac
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(go python node)

NSQ_BIN="$RUSTQUEUE_CACHE/nsqd-$NSQD_VERSION/bin"
PY="${COMPAT_PY:-$RUSTQUEUE_CACHE/pynsq-$PYNSQ_VERSION-tornado-$TORNADO_VERSION/bin/python}"
NODE_MODULES="$RUSTQUEUE_CACHE/nsqjs-$NSQJS_VERSION/node_modules"
RUSTQUEUED_BIN="${RUSTQUEUED_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/rustqueued}"
MAX_MSG=1048576

WORK_PREFIX="rq-compat-$target"
source "$HERE/lib/procs.sh"

# wait_http (lib/procs.sh) checks https:// URLs with the test CA and client certificate.
WAIT_HTTP_CURL=(--cacert "$WORK/tls/ca.pem" --cert "$WORK/tls/client.pem" --key "$WORK/tls/client-key.pem")

check_tools() {
  local c
  for c in "${clients[@]}"; do
    case "$c" in
      go) command -v go >/dev/null || die "go is not installed" ;;
      python) [ -x "$PY" ] || die "no pynsq venv at $PY: run scripts/deps.sh python" ;;
      node) [ -d "$NODE_MODULES/nsqjs" ] || die "no nsqjs in $NODE_MODULES: run scripts/deps.sh node" ;;
      *) die "unknown client '$c' (expected: go python node)" ;;
    esac
  done
  if [ "$target" = nsqd ]; then
    [ -x "$NSQ_BIN/nsqd" ] && [ -x "$NSQ_BIN/nsqlookupd" ] || die "no nsqd in $NSQ_BIN: run scripts/deps.sh nsqd"
  else
    [ -x "$RUSTQUEUED_BIN" ] || die "no rustqueued at $RUSTQUEUED_BIN: cargo build -p rustqueue-server"
  fi
}

start_auth() {
  start auth python3 "$HERE/lib/auth_server.py" "$WORK/auth.port" "$WORK/auth-requests.log"
  local i
  for i in $(seq 1 100); do [ -s "$WORK/auth.port" ] && break; sleep 0.05; done
  AUTH="127.0.0.1:$(cat "$WORK/auth.port")"
  wait_http auth "$AUTH"
}

start_nsqd() {
  mkdir -p "$WORK/data-plain" "$WORK/data-secure"
  local lookupd_tcp lookupd_http
  lookupd_tcp="127.0.0.1:$(free_port)" lookupd_http="127.0.0.1:$(free_port)"
  start nsqlookupd "$NSQ_BIN/nsqlookupd" --tcp-address="$lookupd_tcp" --http-address="$lookupd_http" \
    --broadcast-address=127.0.0.1 --log-level=warn
  wait_http nsqlookupd "$lookupd_http"
  local common=(--broadcast-address=127.0.0.1 "--max-msg-size=$MAX_MSG" --log-level=warn
    "--tls-cert=$WORK/tls/server.pem" "--tls-key=$WORK/tls/server-key.pem")
  PLAIN_TCP="127.0.0.1:$(free_port)" PLAIN_HTTP="127.0.0.1:$(free_port)" PLAIN_LOOKUP="$lookupd_http"
  start plain "$NSQ_BIN/nsqd" --tcp-address="$PLAIN_TCP" --http-address="$PLAIN_HTTP" \
    --https-address="127.0.0.1:$(free_port)" --data-path="$WORK/data-plain" "${common[@]}" \
    --lookupd-tcp-address="$lookupd_tcp"
  # With --tls-required nsqd answers 403 TLS_REQUIRED on its plain HTTP port, so the secure
  # broker's HTTP API is used over HTTPS (with the client certificate: require-verify).
  local https_port
  https_port="$(free_port)"
  SECURE_TCP="127.0.0.1:$(free_port)" SECURE_HTTP="https://127.0.0.1:$https_port" SECURE_LOOKUP=""
  start secure "$NSQ_BIN/nsqd" --tcp-address="$SECURE_TCP" --http-address="127.0.0.1:$(free_port)" \
    --https-address="127.0.0.1:$https_port" --data-path="$WORK/data-secure" "${common[@]}" \
    "--tls-root-ca-file=$WORK/tls/ca.pem" --tls-client-auth-policy=require-verify \
    --tls-required=true "--auth-http-address=$AUTH"
}

# rustqueued_config FILE TCP HTTP DATA SECURE: a broker config file (docs/configuration.md).
rustqueued_config() {
  local file="$1" tcp="$2" http="$3" data="$4" secure="$5"
  cat >"$file" <<EOF
[node]
broadcast_address = "127.0.0.1"

[network]
tcp_address = "$tcp"
http_address = "$http"
advertised_tcp_port = ${tcp##*:}
advertised_http_port = ${http##*:}

[storage]
data_path = "$data"
# The test machine's free disk must not throttle publishing.
disk_high_watermark_percent = 100
disk_low_watermark_percent = 99
min_free_bytes = 1

[queue]
max_message_bytes = $MAX_MSG

[security.tls]
certificate_file = "$WORK/tls/server.pem"
private_key_file = "$WORK/tls/server-key.pem"
EOF
  if [ "$secure" = 1 ]; then
    cat >>"$file" <<EOF
client_ca_file = "$WORK/tls/ca.pem"
require_client_certificate = true
required = true

[security]
auth_http_addresses = ["$AUTH"]
EOF
  fi
  "$RUSTQUEUED_BIN" --config "$file" --check-config >"$WORK/check-$(basename "$file").log" 2>&1 ||
    { cat "$WORK/check-$(basename "$file").log" >&2; die "rustqueued rejects $file"; }
}

# The brokers log warnings, and why each connection they closed was closed (info from the
# session module): a failed scenario prints its broker's log.
RQ_LOG="${RUST_LOG:-warn,rustqueue_server::tcp::session=info}"

start_rustqueued() {
  # The plain broker takes its addresses and data path from the environment overrides
  # (docs/configuration.md, "Environment variables") on top of a file that names other ones;
  # the secure one from the file.
  PLAIN_TCP="127.0.0.1:$(free_port)" PLAIN_HTTP="127.0.0.1:$(free_port)"
  PLAIN_LOOKUP="$PLAIN_HTTP"
  rustqueued_config "$WORK/plain.toml" "127.0.0.1:1" "127.0.0.1:2" "$WORK/wrong-data" 0
  sed -i "s/^advertised_tcp_port = .*/advertised_tcp_port = ${PLAIN_TCP##*:}/; s/^advertised_http_port = .*/advertised_http_port = ${PLAIN_HTTP##*:}/" "$WORK/plain.toml"
  start plain env RUSTQUEUE_TCP_ADDRESS="$PLAIN_TCP" RUSTQUEUE_HTTP_ADDRESS="$PLAIN_HTTP" \
    RUSTQUEUE_DATA_PATH="$WORK/data-plain" RUST_LOG="$RQ_LOG" \
    "$RUSTQUEUED_BIN" --config "$WORK/plain.toml"
  SECURE_TCP="127.0.0.1:$(free_port)" SECURE_HTTP="127.0.0.1:$(free_port)" SECURE_LOOKUP="$SECURE_HTTP"
  rustqueued_config "$WORK/secure.toml" "$SECURE_TCP" "$SECURE_HTTP" "$WORK/data-secure" 1
  start secure env RUST_LOG="$RQ_LOG" "$RUSTQUEUED_BIN" --config "$WORK/secure.toml"
}

# count OUT: sets pass/fail from a suite's PASS/FAIL lines; a suite that passed nothing fails.
count() {
  local out="$1" status _
  pass=0 fail=0
  while read -r status _; do
    if [ "$status" = FAIL ]; then fail=$((fail + 1)); else pass=$((pass + 1)); fi
  done < <(grep -E '^(PASS|FAIL) ' "$out")
  [ "$pass" -gt 0 ] || fail=$((fail + 1))
}

# suite CLIENT MODE: the command line of one client suite for one broker mode.
suite() {
  local client="$1" mode="$2" tcp http lookup
  if [ "$mode" = plain ]; then tcp=$PLAIN_TCP http=$PLAIN_HTTP lookup=$PLAIN_LOOKUP; else
    tcp=$SECURE_TCP http=$SECURE_HTTP lookup=$SECURE_LOOKUP; fi
  local args=(--server "$target" --mode "$mode" --tcp "$tcp" --http "$http" --lookup-http "$lookup"
    --auth-http "$AUTH" --tls-dir "$WORK/tls" --max-msg-size "$MAX_MSG" --run "${COMPAT_RUN:-}")
  case "$client" in
    go) "$GO_BIN" "${args[@]}" ;;
    python) "$PY" "$HERE/python/compat.py" "${args[@]}" ;;
    node) NODE_PATH="$NODE_MODULES" node "$HERE/node/compat.js" "${args[@]}" ;;
  esac
}

main() {
  check_tools
  if [[ " ${clients[*]} " == *" go "* ]]; then
    GO_BIN="$RUSTQUEUE_CACHE/compat-go/compat-go"
    log "building the go-nsq suite (go build cache)"
    (cd "$HERE/go" && go build -o "$GO_BIN" .)
  fi
  bash "$HERE/lib/gen-tls.sh" "$WORK/tls"
  start_auth
  "start_$target"
  wait_http plain "$PLAIN_HTTP"
  wait_http secure "$SECURE_HTTP"
  log "$target plain tcp=$PLAIN_TCP http=$PLAIN_HTTP; secure tcp=$SECURE_TCP http=$SECURE_HTTP; auth=$AUTH"

  local failed_any=0 client mode out pass fail rc
  for client in "${clients[@]}"; do
    out="$WORK/$client.out"
    : >"$out"
    for mode in plain secure; do
      rc=0
      suite "$client" "$mode" 2>"$WORK/$client-$mode.stderr" | tee -a "$out" || rc=$?
      if [ "$rc" != 0 ] && ! grep -q "^FAIL $mode/" "$out"; then
        echo "FAIL $mode/suite: the $client suite exited $rc without a failing scenario" | tee -a "$out"
        tail -n 20 "$WORK/$client-$mode.stderr" | sed 's/^/    | /'
      fi
      if grep -q "^FAIL $mode/" "$out"; then
        echo "    the $mode $target's log, last 30 lines ($WORK/$mode.log):"
        tail -n 30 "$WORK/$mode.log" | sed 's/^/    | /'
      fi
    done
    count "$out"
    if [ -n "${COMPAT_RESULTS_DIR:-}" ]; then
      mkdir -p "$COMPAT_RESULTS_DIR"
      cp "$out" "$COMPAT_RESULTS_DIR/$client-$target.txt"
    fi
    echo "compat-$client-$target: $pass passed, $fail failed"
    [ "$fail" = 0 ] || failed_any=1
  done
  for mode in plain secure; do
    pidvar="PID_$mode"
    kill -0 "${!pidvar}" 2>/dev/null || { echo "the $mode $target died during the run:"; tail -n 20 "$WORK/$mode.log"; failed_any=1; }
  done
  return "$failed_any"
}
main
