#!/usr/bin/env bash
# Builds RustQueue's OCI images without a Docker daemon (see docs/images.md):
#
#   rustqueue/rustqueued:<tag>          entrypoint rustqueued
#   rustqueue/rustqueue-operator:<tag>  entrypoint rustqueue-operator
#   rustqueue/rustqueue-discovery:<tag> entrypoint rustqueue-discovery
#   rustqueue/rustqueue-gateway:<tag>   entrypoint rustqueue-gateway
#   rustqueue/rustqueue-console:<tag>   entrypoint rustqueue-console
#   rustqueue:<tag>                     all five binaries (what config/ and the samples name;
#                                       the operator runs discovery, the gateway and the
#                                       console from the brokers' image)
#
# Each image is the same base layer (images/rootfs.sh: Debian packages, CA certificates, users)
# plus one layer per binary in /usr/local/bin (the console's also holds its web pages, built
# by `make console-ui`, in /usr/share/rustqueue-console), runs as 65532:65532 and carries OCI annotations
# (and the same values as config labels, which survive `docker save`). crane does the OCI
# plumbing against a throwaway `crane registry serve` on loopback: `append` pushes the layers,
# `mutate` sets the config and annotations, `pull --format oci` writes the OCI layout and
# `mutate -o` the `docker save`-compatible tarball (for `kind load image-archive`).
#
# Output (default $CARGO_TARGET_DIR/images, else target/images):
#   <name>.tar                 docker-save tarball, tagged <repo>:<tag>
#   oci/                       one OCI image layout holding all six images (ref.name = tag)
#   <name>.digest              OCI manifest digest (the tarball has the same image ID/config)
#   images.txt                 `<repo>:<tag> <digest>` per image
#
# Usage: scripts/build-images.sh [--bin-dir DIR] [--out DIR] [--tag TAG]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
bin_dir="$target_dir/release"
out="$target_dir/images"
tag="${IMAGE_TAG:-dev}"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) die "unknown argument '$1' (expected --bin-dir, --out, --tag)" ;;
  esac
done

# Every binary the all-in-one image holds, the broker first (its entrypoint).
BINARIES="rustqueued rustqueue-operator rustqueue-discovery rustqueue-gateway rustqueue-console"
crane="$RUSTQUEUE_CACHE/crane-$CRANE_VERSION/bin/crane"
[ -x "$crane" ] || "$ROOT/scripts/deps.sh" crane
for b in $BINARIES; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing: run cargo build --release first"
done
# The console's web pages, served from the directory its RUSTQUEUE_CONSOLE_STATIC_DIR defaults to.
ui_dist="$ROOT/operator/console/ui/dist"
[ -f "$ui_dist/index.html" ] || die "$ui_dist/index.html is missing: run make console-ui first"

start=$SECONDS
work="$out/work"
rm -rf "$out"
mkdir -p "$work/rootfs" "$work/layers"

# Reproducible layers: fixed order, owners and times (the commit's time).
epoch=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
layer() { # layer <tarball> <dir>
  tar --sort=name --mtime="@$epoch" --numeric-owner --format=gnu -C "$2" -cf "$1" .
}

log "base root filesystem from Debian packages"
"$ROOT/images/rootfs.sh" "$work/rootfs" "$RUSTQUEUE_CACHE/debian-$(. /etc/os-release &&
  echo "$VERSION_CODENAME")-debs" "$bin_dir/rustqueued" "$bin_dir/rustqueue-operator" \
  "$bin_dir/rustqueue-discovery" "$bin_dir/rustqueue-gateway" "$bin_dir/rustqueue-console" |
  sed 's/^/    /' >&2
layer "$work/layers/base.tar" "$work/rootfs"
for b in $BINARIES; do
  mkdir -p "$work/$b/usr/local/bin"
  # Release builds carry line tables for backtraces; the image ships the binary without them.
  install -m 0755 "$bin_dir/$b" "$work/$b/usr/local/bin/$b"
  strip --strip-debug "$work/$b/usr/local/bin/$b"
  if [ "$b" = rustqueue-console ]; then
    mkdir -p "$work/$b/usr/share/rustqueue-console"
    cp -R "$ui_dist/." "$work/$b/usr/share/rustqueue-console/"
  fi
  layer "$work/layers/$b.tar" "$work/$b"
done

# A throwaway registry on loopback for crane's append/mutate/pull.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$crane" registry serve --address "127.0.0.1:$port" >"$work/registry.log" 2>&1 &
registry_pid=$!
trap 'kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true' EXIT
reg="127.0.0.1:$port"
# crane, with its progress lines kept out of the way (shown when it fails).
c() { "$crane" "$@" 2>>"$work/crane.log" || { tail -20 "$work/crane.log" >&2; return 1; }; }
for _ in $(seq 50); do
  "$crane" catalog "$reg" --insecure >/dev/null 2>&1 && break
  sleep 0.1
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)
revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then revision="$revision-dirty"; fi
source_url=$(sed -n 's/^repository = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

build() { # build <repo> <entrypoint> <layer>...
  local repo=$1 entry=$2 file=${1//\//-}
  shift 2
  local layers=(-f "$work/layers/base.tar") l
  for l in "$@"; do layers+=(-f "$work/layers/$l.tar"); done
  local meta=()
  for kv in "org.opencontainers.image.title=$repo" "org.opencontainers.image.version=$version" \
    "org.opencontainers.image.revision=$revision" "org.opencontainers.image.source=$source_url" \
    "org.opencontainers.image.created=$created" "org.opencontainers.image.licenses=Apache-2.0" \
    "org.opencontainers.image.description=RustQueue $entry ($tag)"; do
    meta+=(-a "$kv" -l "$kv")
  done
  local config=(--entrypoint "/usr/local/bin/$entry" --user 65532:65532 --workdir /
    -e PATH=/usr/local/bin:/usr/bin:/bin -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
    --set-platform linux/amd64 "${meta[@]}")
  c append --insecure --oci-empty-base "${layers[@]}" -t "$reg/$repo:layers" >/dev/null
  c mutate --insecure "$reg/$repo:layers" "${config[@]}" -t "$reg/$repo:$tag" >/dev/null
  c mutate --insecure "$reg/$repo:layers" "${config[@]}" -t "$repo:$tag" -o "$out/$file.tar" \
    >/dev/null
  # A docker-save tarball keeps the config and layers but not the OCI manifest (nor its
  # annotations, hence the labels), so the two agree on the image ID: the config's digest.
  local digest id tar_id
  digest=$(c digest --insecure "$reg/$repo:$tag")
  id=$(c manifest --insecure "$reg/$repo:$tag" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])')
  tar_id=$(tar -xOf "$out/$file.tar" manifest.json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Config"])')
  [ "$tar_id" = "$id" ] || die "$repo: image ID $tar_id in the tarball, $id in the layout"
  echo "$digest" >"$out/$file.digest"
  echo "$repo:$tag $digest" >>"$out/images.txt"
  pushed+=("$reg/$repo:$tag")
  printf '    %-36s manifest %s, image ID %s\n' "$repo:$tag" "$digest" "$id" >&2
}

pushed=()
log "images (tag $tag, version $version, revision $revision)"
build rustqueue/rustqueued rustqueued rustqueued
build rustqueue/rustqueue-operator rustqueue-operator rustqueue-operator
build rustqueue/rustqueue-discovery rustqueue-discovery rustqueue-discovery
build rustqueue/rustqueue-gateway rustqueue-gateway rustqueue-gateway
build rustqueue/rustqueue-console rustqueue-console rustqueue-console
build rustqueue rustqueued $BINARIES

# One OCI layout holding the six images (blobs shared); crane writes it, then each index entry
# gets its tag as org.opencontainers.image.ref.name (crane would name the throwaway registry).
c pull --insecure --format oci "${pushed[@]}" "$out/oci"
python3 - "$out/oci/index.json" "$out/images.txt" <<'PY'
import json, sys
index_path, listing = sys.argv[1], sys.argv[2]
names = {digest: ref for ref, digest in (line.split() for line in open(listing))}
index = json.load(open(index_path))
for m in index["manifests"]:
    m.setdefault("annotations", {})["org.opencontainers.image.ref.name"] = names[m["digest"]]
index["manifests"].sort(key=lambda m: m["annotations"]["org.opencontainers.image.ref.name"])
json.dump(index, open(index_path, "w"), indent=2)
PY
rm -rf "$work/rootfs"
for b in $BINARIES; do rm -rf "${work:?}/$b"; done
log "images written to $out in $((SECONDS - start))s"
