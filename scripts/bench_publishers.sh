#!/usr/bin/env bash
# Drain throughput per publisher, with the release binary: for each
# publisher and run, a fresh schema gets a backlog of N messages, then
# `outbox relay` runs until none is left unsent. Prints messages/s per run
# and the median. Needs PostgreSQL, Redis and NATS up (scripts/services.sh).
#
#   scripts/bench_publishers.sh [N=20000] [RUNS=3] [publisher …]
#   publishers: postgres redis nats (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
RUNS=${2:-3}
shift 2 2>/dev/null || shift $#
PUBLISHERS=("$@")
((${#PUBLISHERS[@]})) || PUBLISHERS=(postgres redis nats)
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
OUTBOX=target/release/outbox
[[ -x $OUTBOX ]] || cargo build --release -p outbox-cli

url_for() { # publisher tag
  case $1 in
    postgres) echo postgres ;;
    redis) echo "redis://127.0.0.1:6379?stream_prefix=$2:" ;;
    nats) echo "nats://127.0.0.1:4222?subject_prefix=$2.&create_stream=${2^^}" ;;
  esac
}

now_ms() { date +%s%3N; }

cleanup() { # publisher tag: drop what the run left on the broker
  case $1 in
    redis) redis-cli DEL "$2:orders" >/dev/null ;;
    nats) [[ -x target/pyenv/bin/python ]] && target/pyenv/bin/python -c '
import asyncio, sys, nats
async def main():
    nc = await nats.connect("nats://127.0.0.1:4222")
    await nc.jetstream().delete_stream(sys.argv[1])
    await nc.close()
asyncio.run(main())' "${2^^}" ;;
  esac
}

for pub in "${PUBLISHERS[@]}"; do
  rates=()
  for ((run = 1; run <= RUNS; run++)); do
    schema="bench_${pub}_${run}_$RANDOM"
    "$OUTBOX" --database-url "$DB" --schema "$schema" migrate >/dev/null
    psql -qX "$DB" -c "INSERT INTO $schema.messages (event_type, aggregate_type, aggregate_id, topic, payload)
      SELECT 'order.created', 'order', g::text, 'orders', jsonb_build_object('order_id', g, 'total', 1999)
      FROM generate_series(1, $N) g"
    start=$(now_ms)
    "$OUTBOX" --database-url "$DB" --schema "$schema" relay --publisher "$(url_for "$pub" "$schema")" \
      --poll-interval 10ms >/dev/null &
    relay=$!
    until [[ $(psql -qtAX "$DB" -c "SELECT count(*) FROM $schema.all_messages WHERE status <> 'sent'") == 0 ]]; do
      sleep 0.02
    done
    end=$(now_ms)
    kill -TERM "$relay" && wait "$relay" || true
    rate=$(( N * 1000 / (end - start) ))
    rates+=("$rate")
    echo "$pub run $run: $N messages in $((end - start)) ms = $rate msg/s"
    psql -qX "$DB" -c "DROP SCHEMA $schema CASCADE" 2>/dev/null
    cleanup "$pub" "$schema"
  done
  median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
  echo "$pub median: $median msg/s"
done
