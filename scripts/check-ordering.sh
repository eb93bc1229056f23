#!/usr/bin/env bash
# Issue 12's separate check of per-aggregate order, against the release
# binary: builds `outbox` in release mode, then runs
# crates/outbox-cli/tests/it/fault_ordering.rs with OUTBOX_BIN pointing at it
# (300 aggregates × 30 events, two relays of 4 pipelines, webhook 503s on
# 15 % of first attempts, one relay killed with SIGKILL and restarted).
# Prints one line: messages, aggregates, out of order, duplicates.
#
#   scripts/check-ordering.sh            # a random seed (printed)
#   ORDERING_SEED=42 scripts/check-ordering.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
ensure_services postgres
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

cargo build --release -q -p outbox-cli
export OUTBOX_BIN="$PWD/target/release/outbox"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test -q -p outbox-cli --test it fault_ordering -- --nocapture >"$log" 2>&1 || status=$?
line=$(grep -m1 '^ordering check:' "$log" || true)
if [[ $status -ne 0 || -z $line ]]; then
  cat "$log" >&2
  echo "ordering check FAILED${line:+: ${line#ordering check: }}" >&2
  exit 1
fi
# messages=… aggregates=… out_of_order=… duplicates=… (in flight at the kill: …) …
echo "ordering check passed (release binary): ${line#ordering check: }"
