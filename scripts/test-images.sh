#!/usr/bin/env bash
# Inspects what scripts/build-images.sh produced (run by `make images-test`, part of `make test`):
#
#   - each docker-save tarball is tagged <repo>:<tag>, its config runs as 65532:65532 with the
#     expected entrypoint, and carries the version/revision/source labels;
#   - the OCI layout names the six images and their manifests carry the OCI annotations, with
#     the same digests as the tarballs;
#   - the flattened filesystem holds no shell (nothing to `sh -c` into), has the nonroot user and
#     the CA bundle;
#   - the entrypoint really runs from the image alone: chrooted into the unpacked filesystem as
#     65532:65532, with no_new_privs, `--version` exits 0 (every shared library it needs is in
#     the image);
#   - prints each image's size (compressed layers, as pulled; unpacked filesystem).
#
# Usage: scripts/test-images.sh [--out DIR] [--tag TAG]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

out="${CARGO_TARGET_DIR:-$ROOT/target}/images"
tag="${IMAGE_TAG:-dev}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
crane="$RUSTQUEUE_CACHE/crane-$CRANE_VERSION/bin/crane"
[ -x "$crane" ] || die "crane is missing: scripts/deps.sh crane"
[ -f "$out/images.txt" ] || die "no images in $out: run make images first"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { printf 'FAIL %s\n' "$*" >&2; failures=$((failures + 1)); }

check() { # check <repo> <entrypoint> <binaries...>
  local repo=$1 entry=$2 file=${1//\//-}
  shift 2
  local tarball="$out/$file.tar" fs="$work/$file"
  python3 - "$tarball" "$repo:$tag" "/usr/local/bin/$entry" <<'PY' || fail "$repo: config"
import json, sys, tarfile
path, want_tag, want_entry = sys.argv[1:]
with tarfile.open(path) as t:
    manifest = json.load(t.extractfile("manifest.json"))
    assert len(manifest) == 1, manifest
    assert manifest[0]["RepoTags"] == [want_tag], manifest[0]["RepoTags"]
    config = json.load(t.extractfile(manifest[0]["Config"]))["config"]
problems = []
if config.get("User") != "65532:65532": problems.append(f"user {config.get('User')!r}")
if config.get("Entrypoint") != [want_entry]: problems.append(f"entrypoint {config.get('Entrypoint')}")
labels = config.get("Labels") or {}
for key in ("version", "revision", "source", "created", "licenses"):
    if not labels.get(f"org.opencontainers.image.{key}"):
        problems.append(f"label org.opencontainers.image.{key} missing")
if problems:
    sys.exit("; ".join(problems))
PY
  mkdir -p "$fs"
  "$crane" export - - <"$tarball" | tar -x -C "$fs"
  local shells
  shells=$(cd "$fs" && find . \( -name sh -o -name bash -o -name dash -o -name busybox \
    -o -name 'python*' -o -name perl \) -print)
  [ -z "$shells" ] || fail "$repo: shells or interpreters in the image: $shells"
  grep -q '^nonroot:x:65532:65532:' "$fs/etc/passwd" || fail "$repo: no nonroot user"
  grep -q '^nonroot:x:65532:' "$fs/etc/group" || fail "$repo: no nonroot group"
  [ "$(stat -c %u:%g "$fs/home/nonroot")" = 65532:65532 ] || fail "$repo: /home/nonroot owner"
  grep -q 'BEGIN CERTIFICATE' "$fs/etc/ssl/certs/ca-certificates.crt" || fail "$repo: CA bundle"
  local b
  for b in "$@"; do
    # No shell in between: host chroot drops to 65532 and execs the binary in the image root.
    version=$(setpriv --no-new-privs chroot --userspec=65532:65532 "$fs" \
      "/usr/local/bin/$b" --version 2>&1) || fail "$repo: $b --version in the image: $version"
    printf '    %-36s runs as 65532 in the image: %s\n' "$repo:$tag" "${version%%$'\n'*}" >&2
  done
  # Where the console runs, its web pages are in the image, with no reference outside it.
  if [[ " $* " == *" rustqueue-console "* ]]; then
    local ui="$fs/usr/share/rustqueue-console"
    [ -f "$ui/index.html" ] || fail "$repo: no web pages in /usr/share/rustqueue-console"
    ls "$ui"/assets/*.js "$ui"/assets/*.css "$ui"/assets/*.woff2 >/dev/null 2>&1 ||
      fail "$repo: the web pages lack their scripts, styles or fonts"
    if grep -qE 'url\((https?:)?//' "$ui"/assets/*.css; then
      fail "$repo: the pages' styles load something from outside the image"
    fi
    printf '    %-36s web pages: %s files in /usr/share/rustqueue-console\n' "$repo:$tag" \
      "$(find "$ui" -type f | wc -l)" >&2
  fi
  local layers unpacked
  layers=$(python3 -c '
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    m = json.load(t.extractfile("manifest.json"))[0]
    print(sum(t.getmember(l).size for l in m["Layers"]))' "$tarball")
  unpacked=$(du -sb "$fs" | cut -f1)
  printf '    %-36s size: %s MB layers, %s MB unpacked\n' "$repo:$tag" \
    "$(python3 -c "print(round($layers/1e6, 1))")" "$(python3 -c "print(round($unpacked/1e6, 1))")" >&2
}

log "inspecting the images in $out"
check rustqueue/rustqueued rustqueued rustqueued
check rustqueue/rustqueue-operator rustqueue-operator rustqueue-operator
check rustqueue/rustqueue-discovery rustqueue-discovery rustqueue-discovery
check rustqueue/rustqueue-gateway rustqueue-gateway rustqueue-gateway
check rustqueue/rustqueue-console rustqueue-console rustqueue-console
check rustqueue rustqueued rustqueued rustqueue-operator rustqueue-discovery rustqueue-gateway \
  rustqueue-console

python3 - "$out/oci" "$out/images.txt" <<'PY' || fail "OCI layout"
import json, os, sys
layout, listing = sys.argv[1:]
want = dict(line.split() for line in open(listing))
assert json.load(open(os.path.join(layout, "oci-layout")))["imageLayoutVersion"] == "1.0.0"
index = json.load(open(os.path.join(layout, "index.json")))
got = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
assert got == want, (got, want)
for ref, digest in got.items():
    blob = os.path.join(layout, "blobs", *digest.split(":"))
    manifest = json.load(open(blob))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json", manifest["mediaType"]
    ann = manifest.get("annotations", {})
    for key in ("version", "revision", "source"):
        assert ann.get(f"org.opencontainers.image.{key}"), f"{ref}: annotation {key} missing"
    for layer in manifest["layers"]:
        assert os.path.exists(os.path.join(layout, "blobs", *layer["digest"].split(":"))), layer
print("    OCI layout: " + ", ".join(sorted(got)), file=sys.stderr)
PY

[ "$failures" -eq 0 ] || die "$failures image check(s) failed"
log "images OK"
