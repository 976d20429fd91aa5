#!/usr/bin/env bash
# The whole suite (`make test`, which `.ci/run` calls): every stage is a make target, run in
# waves. A wave's stages run at the same time when they do not contend for the same thing (see
# the plan below); a stage's output is shown whole when it ends (never interleaved), headed by
# `[k/N] <stage>` with its elapsed time. At the end — also after a failure — a table of every
# stage's result and time, so the slow stages are visible in every CI log.
#
# Usage: scripts/test-suite.sh [--list] [stage ...]   (default: every stage, in the plan's order)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# The plan: one wave a line; stages of one wave run together. Why these groupings:
# - `build` compiles what every later stage runs (the debug test and binary build, the release
#   images), once, using both cores; nothing else runs beside it.
# - The stages of the second wave wait on sockets, clients and Kubernetes far more than they
#   compute, and share nothing: the e2e scenarios run inside the testbed's own network
#   namespace, the compat stages on loopback ports each picks itself.
PLAN=(
  "lint"
  "build"
  "unit"
  "e2e-operator compat compat-lookupd compat-kodo compat-fleet"
  "powercut-test e2e-testbed monitoring-test images-test chart-test bundle-test fuzz-smoke"
)

all_stages() { printf '%s\n' "${PLAN[@]}" | tr ' ' '\n'; }

if [ "${1:-}" = "--list" ]; then
  all_stages
  exit 0
fi

wanted=("$@")
selected() {
  [ ${#wanted[@]} -eq 0 ] && return 0
  local s
  for s in "${wanted[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

total=0
while read -r s; do selected "$s" && total=$((total + 1)); done < <(all_stages)
[ "$total" -gt 0 ] || die "no such stage: ${wanted[*]} (scripts/test-suite.sh --list)"

logs="$(mktemp -d -t rustqueue-test.XXXXXX)"
suite_start=$SECONDS
declare -A result seconds began
order=()
k=0

clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

table() {
  echo
  echo "==> make test: stage times (wall $(clock $((SECONDS - suite_start))))"
  printf '    %-16s %-7s %8s %8s\n' STAGE RESULT SECONDS "AT"
  local s
  for s in "${order[@]}"; do
    printf '    %-16s %-7s %8s %8s\n' "$s" "${result[$s]:-not run}" "${seconds[$s]:--}" \
      "+$(clock "${began[$s]}")"
  done
}

# run_wave STAGE...: starts each stage (output to its log), waits for all, prints each log
# whole as it finishes. Returns non-zero if any failed.
run_wave() {
  local -A pid=()
  local s failed=0
  for s in "$@"; do
    k=$((k + 1))
    order+=("$s")
    began[$s]=$((SECONDS - suite_start))
    echo "==> [$k/$total] $s started at +$(clock "${began[$s]}")$( [ $# -gt 1 ] && echo " (beside: $*)")"
    if [ $# -eq 1 ]; then
      # A wave of one streams its output as it comes.
      (
        start=$SECONDS
        make --no-print-directory "$s" 2>&1 | tee "$logs/$s.log"
        rc=${PIPESTATUS[0]}
        echo "$rc $((SECONDS - start))" >"$logs/$s.rc"
      )
    else
      (
        start=$SECONDS
        make --no-print-directory "$s" >"$logs/$s.log" 2>&1
        echo "$? $((SECONDS - start))" >"$logs/$s.rc"
      ) &
      pid[$s]=$!
    fi
  done
  local left=()
  for s in "$@"; do [ -n "${pid[$s]:-}" ] && left+=("$s"); done
  while [ ${#left[@]} -gt 0 ]; do
    local pids=()
    for s in "${left[@]}"; do pids+=("${pid[$s]}"); done
    wait -n "${pids[@]}" 2>/dev/null
    local still=()
    for s in "${left[@]}"; do
      if kill -0 "${pid[$s]}" 2>/dev/null; then
        still+=("$s")
      else
        wait "${pid[$s]}" 2>/dev/null
        echo "==> [$s] output:"
        cat "$logs/$s.log"
        report "$s" || failed=1
      fi
    done
    left=("${still[@]}")
  done
  if [ $# -eq 1 ]; then report "$1" || failed=1; fi
  return "$failed"
}

# report STAGE: records and prints the stage's result; non-zero if it failed.
report() {
  local rc secs
  read -r rc secs <"$logs/$1.rc" 2>/dev/null || { rc=1; secs=0; }
  seconds[$1]=$secs
  if [ "$rc" -eq 0 ]; then
    result[$1]=passed
    echo "==> $1 passed in $(clock "$secs")"
  else
    result[$1]=FAILED
    echo "==> $1 FAILED (exit $rc) after $(clock "$secs")"
  fi
  [ "$rc" -eq 0 ]
}

status=0
for wave in "${PLAN[@]}"; do
  stages=()
  for s in $wave; do selected "$s" && stages+=("$s"); done
  [ ${#stages[@]} -gt 0 ] || continue
  if ! run_wave "${stages[@]}"; then
    status=1
    break
  fi
done

# Stages never started (an earlier wave failed) are listed as such.
while read -r s; do
  selected "$s" || continue
  [ -n "${began[$s]:-}" ] && continue
  order+=("$s")
  began[$s]=$((SECONDS - suite_start))
done < <(all_stages)
table
rm -rf "$logs"
if [ "$status" -eq 0 ]; then
  echo "make test: all stages passed"
else
  echo "make test: a stage failed (above); the table shows which"
fi
exit "$status"
