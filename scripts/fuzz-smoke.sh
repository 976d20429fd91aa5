#!/usr/bin/env bash
# Fuzz smoke for the protocol decoders (broker/protocol/fuzz: command, identify, mpub).
# cargo-fuzz needs nightly; the same libFuzzer targets build on stable with the sanitizer-
# coverage passes cargo-fuzz would add (no AddressSanitizer: the crate forbids unsafe code).
# Each target runs FUZZ_SECONDS (default 10) from a corpus cached under target/.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT/broker/protocol/fuzz"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/fuzz"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
log "building fuzz targets ($TRIPLE)"
CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release --target "$TRIPLE" --quiet

passed=0 failed=0
for t in command identify mpub; do
  corpus="$TARGET_DIR/corpus/$t"
  mkdir -p "$corpus"
  if "$TARGET_DIR/$TRIPLE/release/$t" -max_total_time="${FUZZ_SECONDS:-10}" \
      -artifact_prefix="$TARGET_DIR/artifact-$t-" "$corpus" >"$TARGET_DIR/$t.log" 2>&1; then
    passed=$((passed + 1)); log "fuzz $t: ok ($(grep -o 'Done [0-9]* runs' "$TARGET_DIR/$t.log"))"
  else
    failed=$((failed + 1)); tail -30 "$TARGET_DIR/$t.log" >&2; log "fuzz $t: FAILED"
  fi
done
echo "fuzz-smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
