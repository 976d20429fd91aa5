#!/usr/bin/env bash
# The whole suite (`make test`, which `.ci/run` calls). Every stage is a make target. Stages run
# in lanes: all lanes start at once, the stages of a lane run one after another, and a stage
# that needs another lane's work (NEEDS below) waits for it. A stage's output is printed whole
# when it ends (never interleaved), headed `[k/N] <stage>`; every minute a line says what still
# runs; at the end — also after a failure — a table of every stage's result and time.
#
# Usage: scripts/test-suite.sh [--list] [stage ...]   (default: every stage)
#        (naming stages runs only those, without waiting for the ones they need)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
# The build stages below compile the tests, the images and the tools once; the other stages
# then skip those prerequisites (several run at once and must not rebuild the same files).
export RUSTQUEUE_SUITE=1
# The images hold the test build's binaries (see IMAGE_PROFILE in the Makefile): the suite
# compiles every dependency once, not a second time optimised.
export IMAGE_PROFILE="${IMAGE_PROFILE:-debug}"

# Why these lanes, on two cores:
# - The operator scenarios need the e2e test binary, the images and the scenarios' extra
#   releases, then several minutes of Kubernetes clusters at work (four at once: the operator's
#   steps are split over two testbeds, the Kodo profile and tiering have one each). Their lane
#   starts first, so the clusters start two and a half minutes in, and they run their recorded
#   binaries directly (the Makefile's e2e_exe), not waiting for the test build's cargo lock.
#   Warm, they end minutes before the test stages after the test build do. The test build
#   stays niced (NICE) below the scenarios: the other way round (scenarios at 5, the build at
#   0) was measured, and the build took 457 s against 428 and the scenarios a minute and a
#   half longer, the wall the same (15m03s against 14m55s).
# - The images hold the debug binaries (IMAGE_PROFILE), built as the first part of the test
#   build, which waits for them: one cargo directory, whose lock the longest chain gets first.
#   Clippy (its own target dir) and the external tools compile beside it. Clippy is the
#   longest build on a cold machine (niced, ~38 min beside the scenario builds), so nothing
#   waits behind it in its lane: the fuzz smoke has a lane of its own.
#   scripts/deps.sh locks each external tool, so two stages never build one twice.
# - cargo-deny (the `deny` stage) has a lane of its own, niced like the other builds off the
#   longest chain: its one-time build (under 2 min of CPU, cached afterwards) uses what the
#   longest chain leaves while it waits on its clusters; warm, the stage takes seconds. To take
#   it out of `make test`, drop its lane and its NICE entry (`make check` runs it as well).
# - A stage runs its test binaries one after another, so the tests that need only the test
#   build are split in two stages that run side by side: `unit` (every crate's in-source tests,
#   the server's, storage's, the console's and the tools' integration tests, the doc tests) and
#   service-test (the engine's, discovery's and the gateway's). Alone, `unit` took 291 s and
#   was the run's longest chain with the test build and bench-test (15m07s); the halves take
#   about 140 s each. Most of the tiering tests (two minutes alone, four beside the rest,
#   mostly waiting on versitygw's retries and outages) are a stage of their own too.
# - Two tests need a quieter machine than the middle of the run. The minute without the bucket
#   (tier-outage-test) counts durable publishes made one at a time at 500/s: beside `unit` and
#   four clusters it fell to 40 % of that, and it fell below the 90 % it checks with
#   bench-test's benchmarks beside it. bench-test's own load and restart cases failed when it
#   ran from the test build's end, beside `unit`, the power cuts and four clusters, and its
#   600 msg/s over three topics published 206 messages in its one-second window beside the
#   scenarios (it checks 400). So each starts only once the clusters and the power cuts have
#   ended (AFTER), one after the other, bench-test also after `unit`, and the minute without
#   the bucket at a higher priority (NICE -5, like the browser check): its broker's wake-ups
#   are what it measures, and they take little CPU.
# - The browser check (console-browser) is the one stage whose waits are a browser's: each
#   page has 30 s to show. It starts with the test build's end, beside eight other stages, and
#   took 3.5 minutes there against 30 s alone; once its first page took longer than its 30 s.
#   It runs at a higher priority (NICE -5, as root; otherwise it warns and runs at 0): about
#   half a minute of one core, taken from stages that wait on clusters and brokers far more
#   than they compute.
# - The official-client stages are two lanes: the client matrix (compat, about 2.5 minutes) and
#   the lookup, Kodo and fleet runs (about 1.5 minutes), which start once the power cuts have
#   ended. One after the other they ended the run, at +14m30s. Warm runs now take 14m34s to
#   14m50s on the slower two-core host; the longest chain is the test build (480 s beside the
#   clusters), tier-test, the minute without the bucket and bench-test.
# - The stages that run tests share nothing: each testbed lives in its own network namespace
#   with its own Pod address block; the compat stages bind loopback ports they pick themselves.
LANES=(
  "e2e-build images e2e-images e2e-operator"
  "deps"
  "e2e-kodo"
  "e2e-storage"
  "e2e-tiering"
  "lint"
  "fuzz-smoke"
  "test-build unit bench-test"
  "service-test"
  "tier-test tier-outage-test"
  "powercut-test"
  "compat monitoring-test"
  "compat-lookupd compat-kodo compat-fleet"
  "e2e-testbed e2e-install images-test chart-test bundle-test release-test"
  "console-ui console-browser"
  "deny"
)
# stage -> the stages of other lanes it waits for
# Tools are not waited for here: each stage installs the ones it names (Makefile), under each
# tool's lock, so a scenario starts as soon as its own tools exist, not after every tool of the
# `deps` stage (on a new machine promtool alone takes minutes).
declare -A NEEDS=(
  [test-build]="images"
  [images]="console-ui"
  [e2e-kodo]="e2e-build e2e-images"
  [e2e-storage]="e2e-build e2e-images"
  [e2e-tiering]="e2e-build e2e-images"
  [powercut-test]="test-build"
  [compat]="test-build"
  [compat-lookupd]="test-build"
  [e2e-testbed]="test-build"
  [e2e-install]="e2e-build e2e-images"
  [console-browser]="test-build"
  [tier-test]="test-build"
  [service-test]="test-build"
  [release-test]="test-build images"
)
# stage -> the stages of other lanes it starts after, whatever their result: it needs a quieter
# machine, not their work (a failure there does not keep it from running)
declare -A AFTER=(
  [compat-lookupd]="powercut-test"
  [tier-outage-test]="e2e-operator e2e-storage e2e-kodo e2e-tiering e2e-testbed powercut-test"
  [bench-test]="e2e-operator e2e-storage e2e-kodo powercut-test tier-outage-test"
)
# stage -> nice level: the builds yield the CPU to the scenarios; the browser check, whose
# pages have 30 s each to show, goes ahead of the stages beside it
declare -A NICE=([lint]=10 [test-build]=5 [fuzz-smoke]=10 [deny]=10 [console-browser]=-5 [tier-outage-test]=-5)

all_stages() { printf '%s\n' "${LANES[@]}" | tr ' ' '\n'; }

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

clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
now() { echo $((SECONDS - suite_start)); }

# set_rc STAGE RC SECONDS: records that a stage ended. The file is written whole and then
# renamed into place: a lane polling for it (wait_ended) once read it created but still empty,
# and called a stage that had passed failed.
set_rc() {
  echo "$2 $3" >"$logs/$1.rc.tmp" && mv "$logs/$1.rc.tmp" "$logs/$1.rc"
}

# wait_ended STAGE...: until each named stage (when selected) has ended, whatever its result.
wait_ended() {
  local s
  for s in "$@"; do
    selected "$s" || continue
    until [ -e "$logs/$s.rc" ]; do sleep 2; done
  done
}

# wait_for STAGE...: wait_ended, and fails if one of them failed.
wait_for() {
  local s rc
  wait_ended "$@"
  for s in "$@"; do
    selected "$s" || continue
    read -r rc _ <"$logs/$s.rc"
    [ "$rc" -eq 0 ] || return 1
  done
}

# run_stage STAGE: runs `make STAGE` (niced as NICE says) with its output to the stage's log;
# writes "<exit code> <seconds>" to STAGE.rc and its start to STAGE.began.
run_stage() {
  local s=$1 start=$SECONDS rc
  now >"$logs/$s.began"
  echo "==> [${idx[$s]}/$total] $s started at +$(clock "$(now)")"
  nice -n "${NICE[$s]:-0}" make --no-print-directory "$s" >"$logs/$s.log" 2>&1
  rc=$?
  set_rc "$s" "$rc" $((SECONDS - start))
  return "$rc"
}

# print_stage STAGE: its whole output and its result, kept apart from other lanes' by a lock.
print_stage() {
  local rc secs
  read -r rc secs <"$logs/$1.rc"
  {
    flock 9
    echo "==> [$1] output:"
    cat "$logs/$1.log"
    if [ "$rc" -eq 0 ]; then
      echo "==> $1 passed in $(clock "$secs")"
    else
      echo "==> $1 FAILED (exit $rc) after $(clock "$secs")"
    fi
  } 9>"$logs/.print"
}

# run_lane STAGE...: the stages one after another; a failed stage, or one a stage needs, ends
# the lane (what is left is reported as not run).
run_lane() {
  local s
  for s in "$@"; do
    selected "$s" || continue
    # shellcheck disable=SC2086
    if ! wait_for ${NEEDS[$s]:-}; then
      echo "==> $s not run: a stage it needs (${NEEDS[$s]}) failed or did not run"
      set_rc "$s" 125 0
      touch "$logs/$s.skipped"
      skip_rest "$s" "$@"
      return 1
    fi
    # shellcheck disable=SC2086
    wait_ended ${AFTER[$s]:-}
    run_stage "$s"
    local rc=$?
    print_stage "$s"
    if [ "$rc" -ne 0 ]; then
      skip_rest "$s" "$@"
      return 1
    fi
  done
}

# skip_rest STAGE LANE...: marks the lane's stages after STAGE as not run (failed, for the
# stages of other lanes that wait for them).
skip_rest() {
  local failed=$1 s after=""
  shift
  for s in "$@"; do
    if [ -n "$after" ]; then
      set_rc "$s" 125 0
      touch "$logs/$s.skipped"
    fi
    [ "$s" = "$failed" ] && after=1
  done
}

# heartbeat: every minute, which stages are still running and for how long. Its sleep writes
# nowhere and is killed with it: a sleep left holding the suite's output would keep `.ci/run`'s
# tee (and so the run) waiting up to a minute after the last stage.
heartbeat() {
  local nap=""
  trap '[ -n "$nap" ] && kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "${RUSTQUEUE_HEARTBEAT_SECONDS:-60}" >/dev/null 2>&1 </dev/null &
    nap=$!
    wait "$nap" || break
    local f s running=()
    for f in "$logs"/*.began; do
      [ -e "$f" ] || continue
      s=$(basename "$f" .began)
      [ -e "$logs/$s.rc" ] && continue
      running+=("$s $(clock $(($(now) - $(cat "$f"))))")
    done
    [ ${#running[@]} -gt 0 ] || continue
    local joined
    joined=$(printf ', %s' "${running[@]}")
    echo "==> at +$(clock "$(now)") still running: ${joined#, }"
  done
}

# When wanted stages were named, the ones they need may not run: do not wait for those.
if [ ${#wanted[@]} -gt 0 ]; then
  for s in "${!NEEDS[@]}"; do
    kept=()
    for n in ${NEEDS[$s]}; do selected "$n" && kept+=("$n"); done
    NEEDS[$s]="${kept[*]}"
  done
fi

pids=()
for lane in "${LANES[@]}"; do
  # shellcheck disable=SC2086
  run_lane $lane &
  pids+=($!)
done
heartbeat &
beat=$!
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
kill "$beat" 2>/dev/null
wait "$beat" 2>/dev/null

echo
echo "==> make test: stage times (wall $(clock "$(now)"))"
printf '    %-16s %-8s %8s %8s\n' STAGE RESULT SECONDS AT
while read -r _ _ s; do
  result="not run" secs="-" at="-"
  if [ -e "$logs/$s.skipped" ]; then
    :
  elif [ -e "$logs/$s.rc" ]; then
    read -r rc secs <"$logs/$s.rc"
    result=$([ "$rc" -eq 0 ] && echo passed || echo FAILED)
  fi
  [ -e "$logs/$s.began" ] && at="+$(clock "$(cat "$logs/$s.began")")"
  printf '    %-16s %-8s %8s %8s\n' "$s" "$result" "$secs" "$at"
done < <(
  while read -r s; do
    selected "$s" || continue
    b=999999
    [ -e "$logs/$s.began" ] && b=$(cat "$logs/$s.began")
    echo "$b ${idx[$s]} $s"
  done < <(all_stages) | sort -k1,1n -k2,2n)
rm -rf "$logs"
if [ "$status" -eq 0 ]; then
  echo "make test: all stages passed"
else
  echo "make test: a stage failed (above); the table shows which"
fi
exit "$status"
