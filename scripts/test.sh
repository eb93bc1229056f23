#!/usr/bin/env bash
# The project's test command (README "Run the tests"; CI runs exactly this).
# Starts any local service the tests need that is down, then checks
# formatting and lints, then runs every test against the real services.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

ensure_services postgres
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo test --workspace --all-features
