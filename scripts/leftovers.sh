#!/usr/bin/env bash
# What the local servers hold that tests create, one sorted line each:
# databases, schemas in DATABASE_URL's database, Redis keys, NATS JetStream
# streams, RabbitMQ queues and exchanges, MQTT retained topics, and this
# machine's network namespaces (the partition test makes one).
#
#   scripts/leftovers.sh snapshot FILE   writes the list to FILE
#   scripts/leftovers.sh check FILE      lists what is there now and was not
#                                        in FILE; exits 1 if anything is
#
# scripts/test.sh takes a snapshot before the tests and checks after them,
# so a run that leaves anything behind fails, naming it. A server that is
# not running is skipped (--postgres-only runs no broker).
set -euo pipefail
cd "$(dirname "$0")/.."

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
python=${OUTBOX_TEST_PYTHON:-target/pyenv/bin/python}

list() {
  local url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
  psql "$url" -XAtqc "SELECT 'database ' || datname FROM pg_database" || return 1
  psql "$url" -XAtqc "SELECT 'schema ' || nspname FROM pg_namespace" || return 1
  if port_open 6379 && command -v redis-cli >/dev/null; then
    redis-cli --scan | sed 's/^/redis key /'
  fi
  if port_open 4222 && [[ -x $python ]]; then
    "$python" - <<'EOF'
import asyncio, nats
async def main():
    nc = await nats.connect("nats://127.0.0.1:4222")
    for s in await nc.jetstream().streams_info():
        print("nats stream", s.config.name)
    await nc.close()
asyncio.run(main())
EOF
  fi
  if port_open 5672 && command -v rabbitmqctl >/dev/null; then
    rabbitmqctl list_queues -q --no-table-headers name 2>/dev/null | sed 's/^/rabbitmq queue /'
    rabbitmqctl list_exchanges -q --no-table-headers name 2>/dev/null | sed 's/^/rabbitmq exchange /'
  fi
  if port_open 1883 && command -v mosquitto_sub >/dev/null; then
    # Retained messages arrive at once on subscribing; -W ends the wait.
    mosquitto_sub -h 127.0.0.1 -t '#' --retained-only -W 2 -F 'mqtt retained %t' 2>/dev/null || true
  fi
  if command -v ip >/dev/null; then
    ip netns list 2>/dev/null | awk '{print "network namespace " $1}'
  fi
}

case "${1:-}" in
  snapshot)
    list | sort -u >"$2"
    ;;
  check)
    now=$(mktemp)
    list | sort -u >"$now"
    left=$(comm -13 "$2" "$now")
    rm -f "$now"
    if [[ -n $left ]]; then
      echo "leftovers: the tests left on the servers (not there before the run):" >&2
      sed 's/^/  /' <<<"$left" >&2
      exit 1
    fi
    echo "leftovers: none (the servers hold what they held before the run)" >&2
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
