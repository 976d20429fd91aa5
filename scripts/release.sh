#!/usr/bin/env bash
# Builds what a user downloads (docs/install.md, "Release artifacts") into --out:
#
#   rustqueue-<v>-linux-x86_64.tar.gz   bin/ (every binary), rustqueued.example.toml, LICENSE,
#                                       README.md
#   rustqueue-<v>-src.tar.gz            the source of the commit (git archive)
#   rustqueue-<chart v>.tgz             the Helm chart (helm package)
#   images/<name>.tar                   the OCI images as docker-save tarballs (make images)
#   rustqueue-<v>.spdx.json             SPDX 2.3 SBOM: every crate compiled in, with its licence
#   SHA256SUMS                          sha256sum of every file above (check: sha256sum -c)
#
# The version comes from one place, the workspace's Cargo.toml; the script refuses to run when
# a binary, the chart, the OLM bundle or an image label says otherwise.
#
# Usage: scripts/release.sh [--out DIR] [--bin-dir DIR] [--images DIR]
#   --bin-dir: prebuilt binaries (default: build them with cargo build --release)
#   --images:  prebuilt image tarballs (default: make images IMAGE_PROFILE=release)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

out="$ROOT/target/release-artifacts"
bin_dir="" images=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --images) images=$2; shift 2 ;;
    *) die "unknown argument '$1' (expected --out, --bin-dir, --images)" ;;
  esac
done

# Every binary a user runs, by package (rustqueue-bench and the test tools stay out).
BINS=(rustqueued rustqueue-operator rustqueue-discovery rustqueue-gateway rustqueuectl rustqueue-console)
PACKAGES=(rustqueue-server rustqueue-operator rustqueue-discovery rustqueue-gateway rustqueue-ctl rustqueue-console)

version="$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json,sys; print({p["version"] for p in json.load(sys.stdin)["packages"]}.pop())')"
target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -z "$bin_dir" ]; then
  log "building the release binaries ($version)"
  stamp_revision
  args=()
  for p in "${PACKAGES[@]}"; do args+=(-p "$p"); done
  cargo build --release --locked "${args[@]}" --bins
  bin_dir="$target_dir/release"
fi
if [ -z "$images" ]; then
  log "building the images (make images IMAGE_PROFILE=release)"
  make -C "$ROOT" images IMAGE_PROFILE=release IMAGE_TAG="$version"
  images="$target_dir/images"
fi

"$ROOT/scripts/release-versions.py" --version "$version" --bin-dir "$bin_dir" --images "$images" ||
  die "the version is not the same everywhere (above)"

rm -rf "$out"
mkdir -p "$out/images"
stage="$out/work/rustqueue-$version-linux-x86_64"
mkdir -p "$stage/bin"
for b in "${BINS[@]}"; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing"
  install -m 0755 "$bin_dir/$b" "$stage/bin/$b"
done
cp "$ROOT/config/rustqueued.example.toml" "$ROOT/LICENSE" "$ROOT/README.md" "$stage/"
epoch=$(git -C "$ROOT" log -1 --format=%ct)
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  -C "$out/work" -czf "$out/rustqueue-$version-linux-x86_64.tar.gz" "rustqueue-$version-linux-x86_64"
git -C "$ROOT" archive --format=tar.gz --prefix="rustqueue-$version/" -o "$out/rustqueue-$version-src.tar.gz" HEAD

helm="$RUSTQUEUE_CACHE/helm-$HELM_VERSION/bin/helm"
[ -x "$helm" ] || "$ROOT/scripts/deps.sh" helm
"$helm" package "$ROOT/config/helm/rustqueue" --destination "$out" >/dev/null

for t in "$images"/*.tar; do cp "$t" "$out/images/"; done
"$ROOT/scripts/sbom.py" --version "$version" --out "$out/rustqueue-$version.spdx.json"

rm -rf "$out/work"
(cd "$out" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum >SHA256SUMS)
log "release $version in $out:"
(cd "$out" && du -h $(sed 's/^[0-9a-f]*  //' SHA256SUMS) | sed 's/^/    /' >&2)
