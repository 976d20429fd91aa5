#!/usr/bin/env bash
# The operator scenario's extra "releases", derived from the image `make images` built
# (rustqueue.tar, `rustqueue:<tag>`) the way a vendor ships another build of the same binary: the
# same layers, another tag or another default environment in the image config. crane does it
# against a throwaway `crane registry serve` on loopback, as scripts/build-images.sh does.
#
#   rustqueue:next     the very same image under a second tag (a new release to roll to)
#   rustqueue:level1   env RUSTQUEUE_MAX_FEATURE_LEVEL=1: reports and enforces feature level 1,
#                      the way an older release does
#   rustqueue:broken   env RUSTQUEUE_MAX_MESSAGE_BYTES=broken-release: the configuration is
#                      refused at once, the capability probe included (exit 1)
#
# Pod env wins over image env, and the operator's Pods never set these two variables.
# Output: <images>/e2e/rustqueue-<name>.tar (docker save tarballs, tagged rustqueue:<name>), for
# the testbed's registry or `kind load image-archive` (docs/e2e.md).
#
# Usage: e2e/k8s/fixture-images.sh --images DIR
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"

images=""
while [ $# -gt 0 ]; do
  case "$1" in
    --images) images=$2; shift 2 ;;
    *) die "unknown argument '$1' (expected --images DIR)" ;;
  esac
done
[ -n "$images" ] || die "--images DIR is required (make images writes \$CARGO_TARGET_DIR/images)"
[ -f "$images/rustqueue.tar" ] || die "$images/rustqueue.tar is missing: run make images"

crane="$RUSTQUEUE_CACHE/crane-$CRANE_VERSION/bin/crane"
[ -x "$crane" ] || "$ROOT/scripts/deps.sh" crane

start=$SECONDS
out="$images/e2e"
rm -rf "$out"
mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$crane" registry serve --address "127.0.0.1:$port" >"$out/registry.log" 2>&1 &
registry_pid=$!
trap 'kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true' EXIT
reg="127.0.0.1:$port"
c() { "$crane" "$@" 2>>"$out/crane.log" || { tail -20 "$out/crane.log" >&2; return 1; }; }
for _ in $(seq 50); do
  "$crane" catalog "$reg" --insecure >/dev/null 2>&1 && break
  sleep 0.1
done

c push --insecure "$images/rustqueue.tar" "$reg/rustqueue:base" >/dev/null
fixture() { # fixture <name> [crane mutate flags...]
  local name=$1
  shift
  c mutate --insecure "$reg/rustqueue:base" "$@" -t "rustqueue:$name" \
    -o "$out/rustqueue-$name.tar" >/dev/null
  printf '    %-18s %s\n' "rustqueue:$name" "$out/rustqueue-$name.tar" >&2
}
log "scenario releases derived from $images/rustqueue.tar"
fixture next
fixture level1 -e RUSTQUEUE_MAX_FEATURE_LEVEL=1
fixture broken -e RUSTQUEUE_MAX_MESSAGE_BYTES=broken-release
log "written to $out in $((SECONDS - start))s"
