# Shared helpers for the scripts in this folder. Source it; do not run it.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$ROOT/scripts/versions.env"
RUSTQUEUE_CACHE="${RUSTQUEUE_CACHE:-$HOME/.cache/rustqueue}"
export RUSTQUEUE_CACHE

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# cached NAME: true when $RUSTQUEUE_CACHE/NAME holds a finished install (a .done stamp).
cached() { [ -f "$RUSTQUEUE_CACHE/$1/.done" ]; }
# finish NAME: mark an install complete; only called after every step succeeded.
finish() { touch "$RUSTQUEUE_CACHE/$1/.done"; }

# go_tools_without_dwarf: the one-time builds of external Go tools (scripts/deps.sh,
# scripts/build-k8s.sh) strip their binaries or never read their debug info, so the compiler
# need not write DWARF for every package only for the linker to drop it: about 10 % less CPU
# on a cold machine (promtool: 3.7 CPU-minutes against 4.2). Keeps the GOFLAGS `go env` has;
# a script started by one that already set it (build-k8s.sh from deps.sh) adds nothing.
go_tools_without_dwarf() {
  local dwarf=-gcflags=all=-dwarf=false
  case " ${GOFLAGS:-} " in *" $dwarf "*) return 0 ;; esac
  GOFLAGS="$(go env GOFLAGS 2>/dev/null) $dwarf"
  export GOFLAGS
}

# stamp_revision: release builds put the commit into `rustqueued --version`
# (broker/server/build.rs); the same `git describe` the Makefile's release builds use, so
# `make run`, `make bench` and a release share one build instead of recompiling for each other.
stamp_revision() {
  RUSTQUEUE_REVISION="${RUSTQUEUE_REVISION:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || true)}"
  export RUSTQUEUE_REVISION
}
