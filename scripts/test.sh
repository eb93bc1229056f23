#!/usr/bin/env bash
# The project's test command (README "The two commands"; CI runs exactly this).
#
#   scripts/test.sh                  everything: fmt, clippy, every test on
#                                    PostgreSQL and the real brokers
#   scripts/test.sh --postgres-only  what PostgreSQL alone can test: the
#                                    broker tests are skipped, and listed
#
# It checks each local service the tests need and starts it when it is down
# (scripts/services.sh), says what it does at each step, and installs no
# package without saying so: as root it installs the Debian packages a
# fresh machine may lack (python3-venv, make/gcc, chromium for the operator
# page's browser test, pgbouncer), otherwise it stops and prints the command to run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

postgres_only=false
case "${1:-}" in
  "") ;;
  --postgres-only) postgres_only=true ;;
  -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "test.sh: unknown option $1 (try --postgres-only or --help)" >&2; exit 2 ;;
esac

step() { echo "==> $*" >&2; }

# Integration test modules that need a broker running: each crate's
# integration tests are one binary (tests/it), so these are skipped by
# module path.
broker_tests=(
  publisher_redis publisher_asynq publisher_nats publisher_amqp publisher_mqtt
  publisher_kafka relay_brokers relay_streams fault_brokers relay_kafka
)

# A Debian package the tests need: installed when root (saying so), else
# the command to run is printed and the script stops.
need_package() { # what-for package...
  local why=$1
  shift
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    step "installing $* with apt-get ($why)"
    { apt-get update -qq && apt-get install -y -qq "$@"; } >&2
  else
    echo "test.sh: $why needs: sudo apt-get install $*" >&2
    exit 1
  fi
}

if $postgres_only; then
  step "checking PostgreSQL (--postgres-only: no broker is checked or started)"
  ensure_services postgres
else
  step "checking PostgreSQL, RabbitMQ, Mosquitto, Redis and NATS (starting any that is down), and Tansu's install"
  ensure_services postgres rabbitmq mosquitto redis nats tansu
fi
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

# The brokers' own clients read messages back in a second process
# (tests/readback/); their virtualenv is made when missing, and remade when
# the requirements list changed.
pyenv=target/pyenv
requirements=tests/readback/requirements.txt
if [[ ! -x "$pyenv/bin/python" ]] || ! cmp -s "$requirements" "$pyenv/requirements.txt"; then
  step "creating the read-back clients' virtualenv in $pyenv (pip install -r $requirements)"
  if ! python3 -m venv "$pyenv" 2>/dev/null; then
    need_package "the read-back clients' virtualenv" python3-venv
    rm -rf "$pyenv" && python3 -m venv "$pyenv"
  fi
  "$pyenv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$pyenv/requirements.txt"
fi

# The operator page's browser test (crates/outbox-cli/tests/it/ui_browser.rs)
# drives Debian's Chromium with Playwright from the virtualenv above;
# Playwright's own browser download is not used.
if [[ ! -x /usr/bin/chromium ]]; then
  need_package "the operator page's browser test (headless Chromium)" chromium
fi

# The PgBouncer test (crates/outbox-cli/tests/it/pgbouncer.rs) starts its own
# pgbouncer, from Debian's package, in front of a throwaway PostgreSQL.
if [[ ! -x /usr/sbin/pgbouncer ]] && ! command -v pgbouncer >/dev/null; then
  need_package "the PgBouncer test (a transaction-mode pooler in front of PostgreSQL)" pgbouncer
fi

# The kernel-made partition (crates/outbox-cli/tests/it/fault_partition.rs)
# runs the relay in a network namespace of its own, made with iproute2.
if [[ $(id -u) -eq 0 ]] && ! command -v ip >/dev/null; then
  need_package "the network-namespace partition test" iproute2
fi

# The Kafka publisher builds librdkafka from source (rdkafka's bundled build),
# with TLS (and so SASL SCRAM) from the system's OpenSSL.
if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
  need_package "building librdkafka for the Kafka publisher" make gcc
fi
if ! command -v pkg-config >/dev/null || ! pkg-config --exists openssl; then
  need_package "TLS for the Kafka publisher (librdkafka links OpenSSL)" pkg-config libssl-dev
fi

# What the servers hold before the tests: the check at the end fails the run
# if any database, schema, key, stream, queue, exchange or retained message
# is left that was not there (scripts/leftovers.sh).
before=target/leftovers-before.txt
scripts/leftovers.sh snapshot "$before"

# cargo test --no-fail-fast runs every test binary whatever fails; its
# output is kept, and the failing tests are listed at the end.
log=target/test-output.log
failed=0
run_tests() { # cargo test args...
  step "cargo test $*"
  if ! cargo test --no-fail-fast "$@" 2>&1 | tee -a "$log"; then
    failed=1
  fi
}

finish() {
  local code=0
  if [[ $failed -ne 0 ]]; then
    echo "" >&2
    echo "==> FAILED tests (full output in $log):" >&2
    awk '/^ *Running /{bin=$2} /^test .* \.\.\. FAILED$/{print "  " bin ": " $2}' "$log" >&2
    grep -E '^error: (test failed|[0-9]+ targets? failed)' -A20 "$log" | grep -E '^ +`' >&2 || true
    code=1
  fi
  step "checking what the tests left on the servers"
  scripts/leftovers.sh check "$before" || code=1
  exit $code
}

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The library forces no proc macros on applications that enqueue with sqlx.
if cargo tree -q -p outbox --no-default-features --features sqlx -e normal,build | grep -q sqlx-macros; then
  echo "outbox's sqlx feature pulls in sqlx-macros" >&2
  exit 1
fi

: >"$log"
if ! $postgres_only; then
  step "cargo test: every test, on PostgreSQL and the brokers"
  run_tests --workspace --all-features
  finish
fi

step "cargo test: what PostgreSQL alone can test"
skips=()
for m in "${broker_tests[@]}"; do skips+=(--skip "$m::"); done
run_tests --workspace --all-features --lib --bins --examples --tests -- "${skips[@]}"
run_tests --workspace --all-features --doc
echo "" >&2
echo "==> SKIPPED (--postgres-only): ${#broker_tests[@]} broker test modules: ${broker_tests[*]}" >&2
echo "==> run scripts/test.sh without --postgres-only (CI does) to test the brokers too" >&2
finish
