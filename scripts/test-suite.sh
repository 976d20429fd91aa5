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
# Wave 1 builds the tests, the images and the tools once; the stages of wave 2 (several at a
# time) then skip those prerequisites (see the Makefile).
export RUSTQUEUE_SUITE=1

# The plan: one wave a line. A wave's lanes (separated by `|`) run side by side; the stages of
# one lane run one after another. Why this grouping:
# - Wave 1 compiles: clippy (its own target dir), the debug build of every test target, the
#   release build of the images, and (on a new machine) the external tools. Cargo locks each
#   profile's directory on its own, so the builds fill both cores where one alone would wait on
#   a single crate; scripts/deps.sh locks each tool, so two stages never build one twice.
# - Wave 2 runs what was built. Its lanes wait on sockets, clients and Kubernetes far more than
#   they compute, and share nothing: each testbed lives in its own network namespace with its own
#   Pod address block, and the compat stages bind loopback ports they pick themselves.
PLAN=(
  "lint | test-build | images e2e-images | deps fuzz-smoke"
  "e2e-operator | e2e-kodo | unit bench-test powercut-test | compat compat-lookupd compat-kodo compat-fleet monitoring-test | e2e-testbed e2e-install images-test chart-test bundle-test"
)

all_stages() { printf '%s\n' "${PLAN[@]}" | tr ' ' '\n' | grep -v '^|*$'; }

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
declare -A idx
while read -r s; do
  selected "$s" || continue
  total=$((total + 1))
  idx[$s]=$total
done < <(all_stages)
[ "$total" -gt 0 ] || die "no such stage: ${wanted[*]} (scripts/test-suite.sh --list)"

logs="$(mktemp -d -t rustqueue-test.XXXXXX)"
suite_start=$SECONDS
declare -A result seconds began
order=()

clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

table() {
  # every stage that started, in the order it started; then those that never did
  local s
  order=()
  while read -r _ _ s; do order+=("$s"); done < <(
    for s in "${!began[@]}"; do echo "${began[$s]} ${idx[$s]} $s"; done | sort -k1,1n -k2,2n)
  while read -r s; do
    selected "$s" && [ -z "${began[$s]:-}" ] && order+=("$s")
  done < <(all_stages)
  echo
  echo "==> make test: stage times (wall $(clock $((SECONDS - suite_start))))"
  printf '    %-16s %-7s %8s %8s\n' STAGE RESULT SECONDS "AT"
  for s in "${order[@]}"; do
    local at="-"
    [ -n "${began[$s]:-}" ] && at="+$(clock "${began[$s]}")"
    printf '    %-16s %-7s %8s %8s\n' "$s" "${result[$s]:-not run}" "${seconds[$s]:--}" "$at"
  done
}

# run_stage STAGE [stream]: runs `make STAGE`, its output to the stage's log (and to the terminal
# as it comes when `stream` is given); records the exit code and seconds.
run_stage() {
  local s=$1 start=$SECONDS rc
  began[$s]=$((SECONDS - suite_start))
  echo "${began[$s]}" >"$logs/$s.began"
  echo "==> [${idx[$s]}/$total] $s started at +$(clock "${began[$s]}")"
  if [ "${2:-}" = stream ]; then
    make --no-print-directory "$s" 2>&1 | tee "$logs/$s.log"
    rc=${PIPESTATUS[0]}
  else
    make --no-print-directory "$s" >"$logs/$s.log" 2>&1
    rc=$?
  fi
  echo "$rc $((SECONDS - start))" >"$logs/$s.rc"
  return "$rc"
}

# run_lane STAGE...: the stages one after another, stopping at the first failure. Each stage's
# output is printed whole when it ends (a lock keeps two lanes' outputs apart).
run_lane() {
  local s
  for s in "$@"; do
    run_stage "$s"
    local rc=$?
    {
      flock 9
      echo "==> [$s] output:"
      cat "$logs/$s.log"
      report "$s"
    } 9>"$logs/.print"
    [ "$rc" -eq 0 ] || return 1
  done
}

# heartbeat: every minute, which stages are still running and for how long (their output
# comes when they end, so a long wave is not silent in a CI log).
heartbeat() {
  while sleep "${RUSTQUEUE_HEARTBEAT_SECONDS:-60}"; do
    local f s running=()
    for f in "$logs"/*.began; do
      [ -e "$f" ] || continue
      s=$(basename "$f" .began)
      [ -e "$logs/$s.rc" ] && continue
      running+=("$s $(clock $((SECONDS - suite_start - $(cat "$f"))))")
    done
    [ ${#running[@]} -gt 0 ] || continue
    local joined
    joined=$(printf ', %s' "${running[@]}")
    echo "==> at +$(clock $((SECONDS - suite_start))) still running: ${joined#, }"
  done
}

# run_wave "LANE | LANE ...": one lane streams its output as it comes; several run side by side.
run_wave() {
  local IFS='|' lanes=() lane failed=0
  read -ra lanes <<<"$1"
  unset IFS
  local picked=()
  for lane in "${lanes[@]}"; do
    local stages=() s
    for s in $lane; do selected "$s" && stages+=("$s"); done
    [ ${#stages[@]} -gt 0 ] && picked+=("${stages[*]}")
  done
  [ ${#picked[@]} -gt 0 ] || return 0
  if [ ${#picked[@]} -eq 1 ]; then
    for s in ${picked[0]}; do
      run_stage "$s" stream
      report "$s" || return 1
    done
    return 0
  fi
  local joined
  joined=$(printf ' | %s' "${picked[@]}")
  echo "==> side by side:${joined# |}"
  local pids=()
  for lane in "${picked[@]}"; do
    # shellcheck disable=SC2086
    run_lane $lane &
    pids+=($!)
  done
  heartbeat &
  local beat=$!
  local p
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  kill "$beat" 2>/dev/null
  wait "$beat" 2>/dev/null
  # The lanes ran in subshells: read their results back.
  for lane in "${picked[@]}"; do
    for s in $lane; do
      [ -f "$logs/$s.rc" ] || continue
      read -r rc secs <"$logs/$s.rc"
      seconds[$s]=$secs
      result[$s]=$([ "$rc" -eq 0 ] && echo passed || echo FAILED)
      began[$s]=$(cat "$logs/$s.began")
    done
  done
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
  if ! run_wave "$wave"; then
    status=1
    break
  fi
done

table
rm -rf "$logs"
if [ "$status" -eq 0 ]; then
  echo "make test: all stages passed"
else
  echo "make test: a stage failed (above); the table shows which"
fi
exit "$status"
