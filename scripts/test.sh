#!/usr/bin/env bash
# The project's test command (README "Run the tests"; CI runs exactly this).
# Starts any local service the tests need that is down, then checks
# formatting and lints, then runs every test against the real services.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

ensure_services postgres rabbitmq mosquitto redis nats
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

# The brokers' own clients read messages back in a second process
# (tests/readback/); their virtualenv is made when missing, and remade when
# the requirements list changed.
pyenv=target/pyenv
requirements=tests/readback/requirements.txt
if [[ ! -x "$pyenv/bin/python" ]] || ! cmp -s "$requirements" "$pyenv/requirements.txt"; then
  python3 -m venv "$pyenv" 2>/dev/null || {
    { apt-get update -qq && apt-get install -y python3-venv; } >&2 && rm -rf "$pyenv" && python3 -m venv "$pyenv"
  }
  "$pyenv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$pyenv/requirements.txt"
fi

# The Kafka publisher builds librdkafka from source (rdkafka's bundled build).
if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
  { apt-get update -qq && apt-get install -y make gcc; } >&2
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The library forces no proc macros on applications that enqueue with sqlx.
if cargo tree -q -p outbox --no-default-features --features sqlx -e normal,build | grep -q sqlx-macros; then
  echo "outbox's sqlx feature pulls in sqlx-macros" >&2
  exit 1
fi
cargo test --workspace --all-features
