#!/usr/bin/env bash
# The rustqueuectl release tarball for this machine's platform and the krew manifest
# (operator/ctl/krew/rustqueue.yaml) with its version and this platform's sha256 filled in.
# The tarball holds rustqueuectl, kubectl-rustqueue (the same binary: krew installs it by that
# name) and the bash, zsh and fish completions.
#
# Usage: operator/ctl/dist.sh --bin PATH --version X.Y.Z --out DIR
set -euo pipefail
die() { echo "dist.sh: $*" >&2; exit 1; }
bin='' version='' out=''
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) die "unknown argument '$1' (expected --bin, --version, --out)" ;;
  esac
done
[ -x "$bin" ] || die "no executable rustqueuectl at '$bin'"
[ -n "$version" ] && [ -n "$out" ] || die "--version and --out are required"
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die "unsupported machine $(uname -m)" ;;
esac
name="rustqueuectl-v$version-$os-$arch"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin" "$stage/rustqueuectl"
install -m 0755 "$bin" "$stage/kubectl-rustqueue"
mkdir -p "$stage/completions"
"$bin" completion bash >"$stage/completions/rustqueuectl.bash"
"$bin" completion zsh >"$stage/completions/_rustqueuectl"
"$bin" completion fish >"$stage/completions/rustqueuectl.fish"
mkdir -p "$out"
tar -C "$stage" -czf "$out/$name.tar.gz" rustqueuectl kubectl-rustqueue completions
sum=$(sha256sum "$out/$name.tar.gz" | cut -d' ' -f1)
key="SHA256_$(echo "${os}_$arch" | tr '[:lower:]' '[:upper:]')"
sed -e "s/@VERSION@/$version/g" -e "s/@$key@/$sum/" \
  "$(dirname "$0")/krew/rustqueue.yaml" >"$out/rustqueue.yaml"
echo "$out/$name.tar.gz sha256 $sum"
echo "$out/rustqueue.yaml (krew manifest; other platforms keep their placeholders)"
