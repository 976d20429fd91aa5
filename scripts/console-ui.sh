#!/usr/bin/env bash
# Builds the console's web pages (operator/console/ui) into operator/console/ui/dist, which
# rustqueue-console serves and the images carry. Type checks and unit tests (message catalogs
# in both languages, number formats) run first.
#
# The npm packages are installed once per lockfile, with `npm ci`, into
# ~/.cache/rustqueue/console-ui-modules-<lockfile hash> and linked as node_modules, so a fresh
# clone reuses them; a developer's own node_modules directory is left alone.
#
# Usage: scripts/console-ui.sh [build|check|modules]   (default: build, which checks first)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

UI="$ROOT/operator/console/ui"
cd "$UI"
node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
[ "$node_major" -ge 20 ] || die "the console UI needs Node.js 20 or newer (found: $(node --version 2>/dev/null || echo none))"

modules() {
  local hash name dir
  hash="$(sha256sum package-lock.json | cut -c1-16)"
  name="console-ui-modules-$hash"
  dir="$RUSTQUEUE_CACHE/$name"
  mkdir -p "$RUSTQUEUE_CACHE/.locks"
  (
    flock 9
    if ! cached "$name"; then
      log "installing the console UI's npm packages for lockfile $hash (one time)"
      rm -rf "$dir"
      mkdir -p "$dir"
      cp package.json package-lock.json "$dir/"
      # No install scripts: the build needs none (native parts come as prebuilt optional
      # packages), and Carbon's postinstall starts telemetry processes that outlive the install.
      (cd "$dir" && IBM_TELEMETRY_DISABLED=true npm_config_cache="$RUSTQUEUE_CACHE/npm-cache" \
        npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
      finish "$name"
    fi
  ) 9>"$RUSTQUEUE_CACHE/.locks/console-ui-modules"
  if [ -d node_modules ] && [ ! -L node_modules ]; then
    log "using the node_modules directory already in $UI"
  else
    ln -sfn "$dir/node_modules" node_modules
  fi
}

# Type check, then the unit tests; prints `console-ui: N passed, M failed` for the suite's count.
check() {
  npx tsc --noEmit
  local report
  report="$(mktemp)"
  local status=0
  npx vitest run --reporter=default --reporter=json --outputFile="$report" || status=$?
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("console-ui: %d passed, %d failed" % (r["numPassedTests"], r["numFailedTests"]))' "$report"
  rm -f "$report"
  return "$status"
}

case "${1:-build}" in
  modules) modules ;;
  check) modules && check ;;
  build)
    modules
    check
    start=$SECONDS
    npx vite build --logLevel warn
    log "console UI built into $UI/dist in $((SECONDS - start))s"
    ;;
  *) die "usage: scripts/console-ui.sh [build|check|modules]" ;;
esac
