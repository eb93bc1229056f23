#!/usr/bin/env bash
# Checks that each local service the tests use is up, and starts it if not,
# with the same command the machine uses at boot. Sourced by scripts/test.sh;
# `scripts/services.sh postgres redis` also works on its own.

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # name port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    port_open "$2" && return 0
    sleep 0.1
  done
  echo "services: $1 did not come up on port $2 within $3 s" >&2
  return 1
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then return 0; fi
  installed PostgreSQL pg_ctlcluster postgresql || return 1
  echo "services: starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start
  local i
  for ((i = 0; i < 300; i++)); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 0.1
  done
  echo "services: PostgreSQL did not become ready" >&2
  return 1
}

ensure_redis() {
  port_open 6379 && return 0
  installed Redis redis-server redis-server || return 1
  echo "services: starting Redis" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port Redis 6379 30
}

ensure_rabbitmq() {
  port_open 5672 && return 0
  installed RabbitMQ rabbitmq-server rabbitmq-server || return 1
  echo "services: starting RabbitMQ" >&2
  rabbitmq-server -detached
  wait_port RabbitMQ 5672 120
}

ensure_nats() {
  port_open 4222 && return 0
  installed NATS nats-server nats-server || return 1
  echo "services: starting NATS" >&2
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port NATS 4222 30
}

ensure_mosquitto() {
  port_open 1883 && return 0
  installed Mosquitto mosquitto mosquitto || return 1
  echo "services: starting Mosquitto" >&2
  mosquitto -d -c /etc/mosquitto/mosquitto.conf
  wait_port Mosquitto 1883 30
}

# Tansu, a Kafka-protocol broker that runs as its own process (no JVM). Not
# a Debian package: installed once, saying so, from crates.io into a cache
# directory outside the checkout (OUTBOX_CACHE, default ~/.cache/outbox),
# where later runs find it. Nothing is started here: each Kafka test starts
# its own broker on its own port and storage (outbox_testkit::Tansu), so a
# test can crash and restart it, and no test reads a broker worn by others
# (Tansu 0.6.0 has stopped serving fetches after many sessions).
TANSU_VERSION=0.6.0
tansu_bin() { echo "${OUTBOX_CACHE:-$HOME/.cache/outbox}/tansu-$TANSU_VERSION/bin/tansu"; }

ensure_tansu() {
  local bin root
  bin=$(tansu_bin)
  [[ -x $bin ]] && return 0
  root=$(dirname "$(dirname "$bin")")
  echo "services: installing Tansu $TANSU_VERSION (a Kafka-protocol broker the Kafka tests start)" \
    "into $root: cargo install, about 17 minutes on 2 cores, once" >&2
  cargo install --locked tansu --version "$TANSU_VERSION" --features libsql --root "$root" \
    >&2 || return 1
}

# Fails at once, with what to do, when a service is down and cannot be
# started here (not installed): no long wait on a port nothing will open.
installed() { # name binary debian-package
  command -v "$2" >/dev/null && return 0
  local skip=", or run scripts/test.sh --postgres-only to skip the broker tests"
  [[ $1 == PostgreSQL ]] && skip=""
  echo "services: $1 is not running and $2 is not installed: install it (Debian: apt-get install $3)$skip" >&2
  return 1
}

ensure_services() {
  local s
  for s in "$@"; do "ensure_$s" || return 1; done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  ensure_services "${@:-postgres}"
fi
