#!/usr/bin/env bash
# Installs the pinned external tools (scripts/versions.env) into ~/.cache/rustqueue.
# Idempotent: a finished install is marked with a .done stamp and skipped next time.
# Usage: scripts/deps.sh [nsqd|python|node|k8s|openssl|all]...   (default: all)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

deps_nsqd() {
  local name="nsqd-$NSQD_VERSION"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/nsqlookupd" ] && return 0
  log "building official nsqd $NSQD_VERSION (one time)"
  # Not `go install pkg@version`: that also asks the proxy for the module's version list
  # (deprecation check), which the registry mirror refuses. Download the exact version and
  # build inside it with its own go.mod instead.
  local src
  src="$(cd "$RUSTQUEUE_CACHE" && go mod download -json "github.com/nsqio/nsq@$NSQD_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
  (cd "$src" && go build -o "$RUSTQUEUE_CACHE/$name/bin/" ./apps/nsqd ./apps/nsqlookupd ./apps/nsq_tail)
  finish "$name"
}

deps_python() {
  local name="pynsq-$PYNSQ_VERSION-tornado-$TORNADO_VERSION"
  cached "$name" && return 0
  log "creating the pynsq $PYNSQ_VERSION virtualenv (one time)"
  rm -rf "${RUSTQUEUE_CACHE:?}/$name"
  python3 -m venv "$RUSTQUEUE_CACHE/$name"
  "$RUSTQUEUE_CACHE/$name/bin/pip" install --quiet --disable-pip-version-check \
    "pynsq==$PYNSQ_VERSION" "tornado==$TORNADO_VERSION" python-snappy
  finish "$name"
}

deps_node() {
  local name="nsqjs-$NSQJS_VERSION"
  cached "$name" && return 0
  log "installing nsqjs $NSQJS_VERSION (one time)"
  rm -rf "${RUSTQUEUE_CACHE:?}/$name"
  mkdir -p "$RUSTQUEUE_CACHE/$name"
  (cd "$RUSTQUEUE_CACHE/$name" && npm init -y >/dev/null &&
    npm install --silent --no-audit --no-fund "nsqjs@$NSQJS_VERSION")
  finish "$name"
}

# Kubernetes control plane for the e2e testbed (one multi-call Go binary; see build-k8s.sh).
deps_k8s() {
  "$ROOT/scripts/build-k8s.sh"
}

# The client matrix (e2e/compat) makes its TLS material with the openssl CLI (a Debian package).
deps_openssl() {
  command -v openssl >/dev/null && return 0
  log "installing openssl (apt)"
  apt-get update -qq && apt-get install -y -qq openssl >/dev/null
}

main() {
  mkdir -p "$RUSTQUEUE_CACHE"
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=(all)
  for t in "${targets[@]}"; do
    case "$t" in
      all) deps_nsqd; deps_python; deps_node; deps_k8s; deps_openssl ;;
      nsqd | python | node | k8s | openssl) "deps_$t" ;;
      *) die "unknown tool '$t' (expected: nsqd python node k8s openssl all)" ;;
    esac
  done
}
main "$@"
