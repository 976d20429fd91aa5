#!/usr/bin/env bash
# `make cluster`: a local Kubernetes (the e2e testbed, no Docker) with the operator installed from
# the images by `kubectl apply -k config/default` and a 3-broker RustQueue, waits until it is
# Ready, prints how to reach it from this machine, and tears everything down on Ctrl-C.
# See docs/install.md ("A local cluster") and docs/e2e.md (the testbed).
# Usage: scripts/cluster.sh --images <dir with rustqueue.tar> --testbed <rustqueue-testbed binary>
set -euo pipefail
source "$(dirname "$0")/lib.sh"

images="" testbed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --images) images="$2"; shift 2 ;;
    --testbed) testbed="$2"; shift 2 ;;
    *) die "unknown argument $1 (usage: scripts/cluster.sh --images DIR --testbed BIN)" ;;
  esac
done
[ -f "$images/rustqueue.tar" ] || die "$images/rustqueue.tar missing: run \`make images\`"
[ -x "$testbed" ] || die "$testbed missing: run \`make cluster\`"
kubectl="$RUSTQUEUE_CACHE/kubectl-$K8S_VERSION/bin/kubectl"
nsq_tail="$RUSTQUEUE_CACHE/nsqd-$NSQD_VERSION/bin/nsq_tail"
[ -x "$kubectl" ] || die "$kubectl missing: run \`scripts/deps.sh kubectl\`"
ns=rustqueue-system queue=queue

work="$(mktemp -d)"
chmod 755 "$work"
pid=""
teardown() {
  trap - EXIT INT TERM
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    log "tearing the testbed down"
    # Until the testbed has installed its Ctrl-C handler (a background job starts with SIGINT
    # ignored), a signal is lost: repeat it until the testbed has torn itself down.
    while kill -INT "$pid" 2>/dev/null; do
      for _ in 1 2 3 4; do kill -0 "$pid" 2>/dev/null && sleep 0.5; done
    done
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap teardown EXIT
trap 'exit 130' INT TERM

log "starting a 3-Node testbed with the images of $images"
"$testbed" up --nodes 3 --label rustqueue.io/eligible=true \
  --registry-image "rustqueue:dev=$images/rustqueue.tar" >"$work/up.out" 2>"$work/testbed.log" &
pid=$!
for _ in $(seq 1 360); do
  [ -s "$work/up.out" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/testbed.log" >&2; die "the testbed exited"; }
  sleep 0.5
done
kc="$(head -1 "$work/up.out")"
[ -f "$kc" ] || { cat "$work/testbed.log" >&2; die "the testbed did not come up"; }
k() { "$kubectl" --kubeconfig "$kc" "$@"; }

log "installing the operator: kubectl apply -k config/default"
k apply -k "$ROOT/config/default" >/dev/null
k wait --for=condition=Established --timeout=60s crd/rustqueues.rustqueue.io \
  crd/rustqueuetopics.rustqueue.io crd/rustqueuechannels.rustqueue.io >/dev/null

# The sample, adapted to the testbed as a user adapts it to a cluster: its StorageClass, and no
# disk watermarks (a testbed volume is a directory on the shared host disk, without a quota).
mkdir -p "$work/sample"
cat >"$work/sample/kustomization.yaml" <<YAML
resources:
  - $(realpath --relative-to="$work/sample" "$ROOT/config/samples")
patches:
  - target: {kind: RustQueue, name: $queue}
    patch: |-
      - {op: replace, path: /spec/storageClassName, value: testbed-hostpath}
      - {op: add, path: /spec/diskHighWatermarkPercent, value: 100}
      - {op: add, path: /spec/diskLowWatermarkPercent, value: 99}
YAML
log "creating the 3-broker RustQueue $queue (config/samples) and waiting until it is Ready"
k apply -n "$ns" -k "$work/sample" >/dev/null
if ! k -n "$ns" wait "rustqueue/$queue" --for=condition=Ready --timeout=6m >/dev/null; then
  k -n "$ns" get rustqueue,pods -o wide >&2 || true
  die "the RustQueue did not become Ready (testbed log: $work/testbed.log)"
fi

# A Pod's view of the network from this machine: the testbed's network namespace (Pod and
# Service IPs), and in a private mount namespace the cluster DNS as /etc/resolv.conf, so
# `<name>.<namespace>.svc` names resolve as they do in a Pod (docs/e2e.md: Services and DNS).
# The testbed's CoreDNS has an address of its own there, the one every Pod's resolv.conf names.
dns="$(k -n kube-system get service kube-dns -o 'jsonpath={.spec.clusterIP}' 2>/dev/null || true)"
[ -n "$dns" ] || dns=10.96.0.10
printf 'nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' \
  "$dns" "$ns" >"$work/resolv.conf"
in_cluster="$work/in-cluster"
cat >"$in_cluster" <<SH
#!/bin/sh
# Runs a command as a Pod of the make-cluster testbed sees the network (Pod IPs, Service names).
exec nsenter --net=/proc/$pid/ns/net unshare --mount sh -c 'mount --bind $work/resolv.conf /etc/resolv.conf && exec "\$@"' sh "\$@"
SH
chmod 755 "$in_cluster"

discovery="$queue-discovery.$ns.svc:4161"
publish="http://$queue-gateway.$ns.svc:4151"
# Runs the example below exactly as printed before printing it.
"$in_cluster" curl -sf -d "hello from make cluster" "$publish/pub?topic=demo" >/dev/null ||
  die "publishing to $publish failed"
# The discovery learns a new topic from the brokers within seconds; nsq_tail asks it once a
# minute, so wait until it answers rather than for nsq_tail's next poll.
for _ in $(seq 1 60); do
  "$in_cluster" curl -sf "http://$discovery/lookup?topic=demo" >/dev/null && break
  sleep 1
done
console="http://$queue-console.$ns.svc:4180"
"$in_cluster" curl -sf "$console/api/v1/snapshot" >/dev/null ||
  die "the console's snapshot at $console/api/v1/snapshot did not answer"
consumed="$(timeout 60 "$in_cluster" "$nsq_tail" --lookupd-http-address="$discovery" --topic=demo --channel=demo -n 1 2>"$work/nsq_tail.log" || true)"
[ "$consumed" = "hello from make cluster" ] ||
  { cat "$work/nsq_tail.log" >&2; die "nsq_tail via $discovery read '$consumed'"; }

cat <<TXT

RustQueue is Ready: 3 brokers in namespace $ns, the operator in deployment/rustqueue-operator.

  export KUBECONFIG=$kc
  $kubectl get rustqueue,pods -n $ns

Inside the cluster:
  lookup (nsqlookupd API):  http://$queue-discovery.$ns.svc:4161
  publish (TCP / HTTP):     $queue-gateway.$ns.svc:4150 / http://$queue-gateway.$ns.svc:4151

From this machine, $in_cluster runs a command as a Pod sees the network (the
testbed's network namespace and the cluster DNS). Publish and consume (both just checked):
  $in_cluster curl -d 'hello' '$publish/pub?topic=demo'
  $in_cluster $nsq_tail --lookupd-http-address=$discovery --topic=demo --channel=demo -n 1

The console (docs/console.md) at $console, its snapshot (just checked):
  $in_cluster curl -s $console/api/v1/snapshot
On a real cluster (the testbed has no kubectl port-forward), open it with
  kubectl -n $ns port-forward svc/$queue-console 4180:4180    # then http://127.0.0.1:4180/

Ctrl-C tears everything down.
TXT
wait "$pid"
