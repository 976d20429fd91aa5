#!/usr/bin/env bash
# The Kodo compatibility profile on loopback (docs/kodo.md "Testing", e2e/kodo/README.md):
# three rustqueued, rustqueue-discovery in Kodo mode, three rustqueue-gateway in Kodo mode and a
# stand-in for the <n>-kodo-publish Service, driven by the Kodo stand-in (e2e/kodo/standin,
# go-nsq used the way Kodo uses it).
#
#   brokers      127.0.0.1:<free>            node ids 1..3, 100 MiB messages, feature level 2
#   discovery    127.0.0.1:<free>            Kodo mode, static brokers, gateway address SVC
#   gateway k    127.0.18.<k+1>              TCP 4150, stats shards 4151/4154/4155, metrics 4160
#   SVC          127.0.18.10                 4150/4152/4153 -> a gateway's 4150 (round-robin per
#                                            connection), 4151/4154/4155 -> a gateway's same port
#
# Scenario: /nodes advertises SVC; 200 x 64 KiB, then 6 x (100 MiB - 100 B) with the broker that
# takes them SIGKILLed mid-publish and restarted; /stats through the three shards sums to what
# the brokers hold; a drained broker makes the next publishes land elsewhere; `verify` consumes
# the topic via /lookup and finds every acknowledged message intact (missing must be 0).
# Counts its six checks (/nodes, small publish, large publish with a broker killed, /stats
# shards, drain, verify) and prints `compat-kodo: N passed, M failed` (the closing count
# .ci/run sums), the reason of a failure and the figures.
#
# Env: RUSTQUEUED_BIN, DISCOVERY_BIN, GATEWAY_BIN (default $CARGO_TARGET_DIR/debug/...),
# KODO_LARGE (6), KODO_LARGE_SIZE (104857500), KODO_SMALL (200), COMPAT_KEEP=1 keeps the work dir
# (logs, ledgers).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../scripts/lib.sh"

BIN_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
RUSTQUEUED_BIN="${RUSTQUEUED_BIN:-$BIN_DIR/rustqueued}"
DISCOVERY_BIN="${DISCOVERY_BIN:-$BIN_DIR/rustqueue-discovery}"
GATEWAY_BIN="${GATEWAY_BIN:-$BIN_DIR/rustqueue-gateway}"
LARGE_N="${KODO_LARGE:-6}"
SMALL_N="${KODO_SMALL:-200}"
LARGE_SIZE="${KODO_LARGE_SIZE:-104857500}"
SMALL_SIZE=65536
TOPIC=kodo
CHANNEL=verify
SVC=127.0.18.10
GWS=(127.0.18.1 127.0.18.2 127.0.18.3)

for b in "$RUSTQUEUED_BIN" "$DISCOVERY_BIN" "$GATEWAY_BIN"; do
  [ -x "$b" ] || die "no $b: cargo build -p rustqueue-server -p rustqueue-discovery -p rustqueue-gateway"
done
command -v go >/dev/null || die "go not found (the stand-in is a Go module)"

WORK_PREFIX="rq-kodo"
source "$HERE/../compat/lib/procs.sh"
T0=$SECONDS
passed=0
ok() { passed=$((passed + 1)); }
die() {
  printf 'error: %s\n' "$*" >&2
  echo "compat-kodo: $passed passed, 1 failed"
  exit 1
}

log "building the Kodo stand-in (go build cache)"
(cd "$HERE/standin" && go build -o "$WORK/standin" .)
STANDIN="$WORK/standin"

# --- brokers -------------------------------------------------------------------------------
B_TCP=() B_HTTP=()
broker_config() {
  local n="$1"
  cat >"$WORK/b$n.toml" <<EOT
[node]
id = $n
broadcast_address = "127.0.0.1"

[network]
tcp_address = "${B_TCP[$n]}"
http_address = "${B_HTTP[$n]}"

[storage]
data_path = "$WORK/data-$n"
# 100 MiB messages need storage feature level 2 and segments above the largest body.
feature_level = 2
max_segment_bytes = 268435456
# The test machine's free disk must not throttle publishing.
disk_high_watermark_percent = 100
disk_low_watermark_percent = 99
min_free_bytes = 1

[queue]
max_message_bytes = 104857600

[limits]
max_body_bytes = 134217728
connection_publish_inflight_bytes = 134217728
node_publish_inflight_bytes = 536870912
connection_delivery_inflight_bytes = 134217728
node_delivery_inflight_bytes = 536870912
EOT
}
start_broker() {
  local n="$1"
  start "b$n" env RUST_LOG="${RUST_LOG:-warn}" "$RUSTQUEUED_BIN" --config "$WORK/b$n.toml"
  wait_http "b$n" "${B_HTTP[$n]}"
}
for n in 1 2 3; do
  B_TCP[$n]="127.0.0.1:$(free_port)" B_HTTP[$n]="127.0.0.1:$(free_port)"
  broker_config "$n"
  start_broker "$n"
done

# --- discovery (Kodo mode) -------------------------------------------------------------------
LOOKUP="127.0.0.1:$(free_port)"
start lookup env RUST_LOG="${RUST_LOG:-warn}" RUSTQUEUE_KODO_COMPATIBILITY_ENABLED=true \
  RUSTQUEUE_KODO_CLEANUP_ENABLED=false RUSTQUEUE_KODO_GATEWAY_ADDRESS="$SVC" \
  "$DISCOVERY_BIN" --address "$LOOKUP" --static-brokers "${B_HTTP[1]},${B_HTTP[2]},${B_HTTP[3]}"
wait_http lookup "$LOOKUP"

# wait_for WHAT SECONDS CMD...: until CMD succeeds.
wait_for() {
  local what="$1" limit="$2" i
  shift 2
  for i in $(seq 1 $((limit * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$what not within ${limit} s"
}
lookup_ready() { curl -fsS "http://$LOOKUP/v1/health" | grep -q '"lookup_ready":true'; }
wait_for "discovery lookup_ready (all three shards)" 20 lookup_ready

# --- gateways (Kodo mode) and the Service stand-in --------------------------------------------
for k in 0 1 2; do
  start "gw$k" env RUST_LOG="${RUST_LOG:-warn}" RUSTQUEUE_KODO_COMPATIBILITY_ENABLED=true \
    RUSTQUEUE_KODO_GATEWAY_ORDINAL="$k" RUSTQUEUE_KODO_CLEANUP_ENABLED=false \
    RUSTQUEUE_DISCOVERY_URLS="http://$LOOKUP" \
    RUSTQUEUE_GATEWAY_TCP_ADDRESS="${GWS[$k]}:4150" RUSTQUEUE_GATEWAY_HTTP_ADDRESS="${GWS[$k]}:4151" \
    RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES=104857600 RUSTQUEUE_GATEWAY_MAX_BODY_BYTES=134217728 \
    RUSTQUEUE_GATEWAY_MAX_INFLIGHT_BYTES=536870912 \
    "$GATEWAY_BIN"
done
for k in 0 1 2; do
  wait_http "gw$k" "${GWS[$k]}:4160"
  gw_ready() { curl -fsS -o /dev/null "http://$1:4160/v1/health"; }
  wait_for "gateway $k /v1/health 200 (publish pool non-empty)" 20 gw_ready "${GWS[$k]}"
done
start svc "$STANDIN" forward -addr "$SVC" -gateways "$(IFS=,; echo "${GWS[*]}")"
svc_up() { curl -fsS -o /dev/null "http://$SVC:4151/stats?format=json"; }
wait_for "the Service stand-in on $SVC" 10 svc_up

# /nodes: exactly the three gateway identities at the Service address.
nodes="$(curl -fsS "http://$LOOKUP/nodes")"
python3 - "$nodes" "$SVC" <<'PY' || die "/nodes is not the three gateway identities: $nodes"
import json, sys
got = [(p["broadcast_address"], p["tcp_port"], p["http_port"], p["node_id"])
       for p in json.loads(sys.argv[1])["producers"]]
svc = sys.argv[2]
want = [(svc, 4150, 4151, 1000000), (svc, 4152, 4154, 1000001), (svc, 4153, 4155, 1000002)]
sys.exit(0 if got == want else 1)
PY
log "/nodes advertises $SVC:4150/4152/4153 (stats 4151/4154/4155); lookup_ready"
ok

for n in 1 2 3; do
  curl -fsS -X POST "http://${B_HTTP[$n]}/channel/create?topic=$TOPIC&channel=$CHANNEL" >/dev/null
done

# count N: topic message_count on broker N (0 while it does not answer).
count() {
  curl -fsS "http://${B_HTTP[$1]}/stats?format=json&topic=$TOPIC" 2>/dev/null |
    python3 -c 'import json,sys
d=json.load(sys.stdin)
print(sum(t.get("message_count",0) for t in d["topics"] if t.get("topic_name",t.get("name"))=="'"$TOPIC"'"))' ||
    echo 0
}
counts() { echo "$(count 1) $(count 2) $(count 3)"; }
publish() { # publish NAME N SIZE FIRST_ID
  "$STANDIN" publish -lookupd "$LOOKUP" -topic "$TOPIC" -refresh 1s -n "$2" -size "$3" \
    -first-id "$4" -ledger "$WORK/ledger-$1.jsonl" -summary "$WORK/summary-$1.json"
}

# --- 1. small messages ---------------------------------------------------------------------------
t=$SECONDS
publish small "$SMALL_N" "$SMALL_SIZE" 1 >"$WORK/publish-small.log" 2>&1 ||
  { tail -n 20 "$WORK/publish-small.log" >&2; die "small publish failed"; }
log "small: $(cat "$WORK/summary-small.json") in $((SECONDS - t)) s"
ok

# --- 2. large messages, the receiving broker SIGKILLed mid-publish -------------------------------
before=($(counts))
t=$SECONDS
publish large "$LARGE_N" "$LARGE_SIZE" 100001 >"$WORK/publish-large.log" 2>&1 &
PUB_PID=$!
PIDS+=("$PUB_PID")
# The gateway keeps its broker session, so the broker that took the first two large messages
# takes the third: once the second is acknowledged, kill that broker halfway through the third
# body's transfer (the stand-in first spends generate_ms making it, then about publish_ms
# sending it, as the second one did).
for i in $(seq 1 600); do
  [ "$(cat "$WORK/ledger-large.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
  kill -0 "$PUB_PID" 2>/dev/null || die "large publish ended early: $(tail -n 5 "$WORK/publish-large.log")"
  sleep 0.05
done
t_line=$(date +%s%N)
now=($(counts))
victim=1 best=-1
for n in 1 2 3; do
  d=$((now[n - 1] - before[n - 1]))
  [ "$d" -gt "$best" ] && best=$d victim=$n
done
delay_ms="$(sed -n 2p "$WORK/ledger-large.jsonl" | python3 -c 'import json,sys; e=json.load(sys.stdin); print(e["generate_ms"] + e["publish_ms"] // 2)')"
wait_ms=$((delay_ms - ($(date +%s%N) - t_line) / 1000000))
[ "$wait_ms" -gt 0 ] && sleep "$(printf '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000)))"
pidvar="PID_b$victim"
when="mid-publish"
kill -0 "$PUB_PID" 2>/dev/null || when="after the publish ended (raise KODO_LARGE_SIZE)"
{
  kill -KILL "${!pidvar}"
  wait "${!pidvar}" || true
} 2>/dev/null
log "SIGKILLed broker $victim $when, ${delay_ms} ms after the 2nd acknowledgement (it had taken $best large message(s)); restarting it in 2 s"
sleep 2
start_broker "$victim"
wait "$PUB_PID" || { tail -n 20 "$WORK/publish-large.log" >&2; die "large publish failed"; }
log "large: $(cat "$WORK/summary-large.json") in $((SECONDS - t)) s"
grep -q '"acknowledged":[1-9]' "$WORK/summary-large.json" || die "no large message was acknowledged"
wait_for "discovery lookup_ready after broker $victim restarted" 30 lookup_ready
ok

# --- 3. /stats through the three shards == what the brokers hold --------------------------------
stats_agree() {
  local shards direct
  shards="$("$STANDIN" stats -lookupd "$LOOKUP" -topic "$TOPIC")" || return 1
  direct="$("$STANDIN" stats -http "${B_HTTP[1]},${B_HTTP[2]},${B_HTTP[3]}" -topic "$TOPIC")" || return 1
  STATS_LAST="shards $shards brokers $direct"
  python3 - "$shards" "$direct" <<'PY'
import json, sys
s, d = json.loads(sys.argv[1]), json.loads(sys.argv[2])
keys = ("message_count", "channel_depth", "topic_depth")
sys.exit(0 if all(s[k] == d[k] for k in keys) and s["answers"] == 3 and d["message_count"] > 0 else 1)
PY
}
STATS_LAST=""
for i in $(seq 1 100); do
  stats_agree && break
  [ "$i" = 100 ] && die "/stats via the three shards never matched the brokers: $STATS_LAST"
  sleep 0.2
done
log "stats: $STATS_LAST"
ok

# --- 4. a drained broker: the next publishes land elsewhere ---------------------------------------
before=($(counts))
busiest=1
for n in 2 3; do [ "${before[n - 1]}" -gt "${before[busiest - 1]}" ] && busiest=$n; done
curl -fsS -X POST -H 'Content-Type: application/json' -d '{"enabled":true}' \
  "http://${B_HTTP[$busiest]}/v1/drain" >/dev/null
publish drain 3 "$SMALL_SIZE" 200001 >"$WORK/publish-drain.log" 2>&1 ||
  { tail -n 20 "$WORK/publish-drain.log" >&2; die "publish with broker $busiest drained failed"; }
after=($(counts))
grep -q '"acknowledged":3' "$WORK/summary-drain.json" ||
  die "publishes with broker $busiest drained: $(cat "$WORK/summary-drain.json")"
[ "${after[busiest - 1]}" = "${before[busiest - 1]}" ] ||
  die "drained broker $busiest took publishes: ${before[*]} -> ${after[*]}"
[ $(( (after[0] + after[1] + after[2]) - (before[0] + before[1] + before[2]) )) -ge 3 ] ||
  die "the publishes did not land: ${before[*]} -> ${after[*]}"
retries=0
for k in 0 1 2; do
  r="$(curl -fsS "http://${GWS[$k]}:4160/metrics" | awk '/^rustqueue_gateway_producer_retries_total/ {print $2}')"
  r="${r:-0}"
  retries=$((retries + ${r%.*}))
done
log "drain: broker $busiest drained; counts ${before[*]} -> ${after[*]}; gateway producer retries $retries"
ok

# --- 5. verify: every acknowledged message arrived intact -----------------------------------------
t=$SECONDS
"$STANDIN" verify -lookupd "$LOOKUP" -topic "$TOPIC" -channel "$CHANNEL" -timeout 90s \
  -ledger "$WORK/ledger-small.jsonl,$WORK/ledger-large.jsonl,$WORK/ledger-drain.jsonl" \
  >"$WORK/verify.log" 2>&1 || {
  cat "$WORK/verify.log" >&2
  for n in 1 2 3; do
    echo "broker $n: $(curl -sS "http://${B_HTTP[$n]}/stats?format=json&topic=$TOPIC")" >&2
  done
  echo "lookup: $(curl -sS "http://$LOOKUP/lookup?topic=$TOPIC")" >&2
  die "verify failed"
}
cat "$WORK/verify.log"
log "verify in $((SECONDS - t)) s"
ok
echo "compat-kodo: $passed passed, 0 failed in $((SECONDS - T0)) s (killed broker $victim $when, drained broker $busiest)"
