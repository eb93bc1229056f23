#!/usr/bin/env bash
# Drains N committed rows (default 20000) through each publisher with the
# release binary and prints messages/s, the median of RUNS runs (default 3).
# Nothing here is asserted (cli_bench.rs only runs it, small, on postgres).
#
#   scripts/bench-publishers.sh [postgres amqp mqtt http redis asynq nats kafka]
#   N=300 RUNS=1 OUTBOX_BIN=path/to/outbox scripts/bench-publishers.sh postgres
#
# Each run: a fresh schema, N rows inserted in one statement, then
# `outbox relay --batch-size 500` runs until every row is sent (polled in the
# database), and is stopped with SIGINT. RabbitMQ gets a queue bound to the
# exchange (unroutable messages would be dead-lettered); MQTT needs no
# subscriber; webhooks go to a small Python server answering 204; Redis
# streams and asynq queues are deleted after each run, and so are the NATS
# streams the relay creates (create_stream). Kafka runs against a Tansu broker
# started for the run (port 19092, empty SQLite storage, a 6-partition topic)
# and killed after it; then, as many times, the same broker and records with
# a plain producer and no database (scripts/kafka_produce.py), the broker's
# own ceiling, printed as `kafka broker alone`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

publishers=(${@:-postgres amqp mqtt http})
# Only the services the publishers asked for are checked (and started).
services=(postgres)
for pub in "${publishers[@]}"; do
  case $pub in
    postgres | http) ;;
    amqp) services+=(rabbitmq) ;;
    mqtt) services+=(mosquitto) ;;
    redis | asynq) services+=(redis) ;;
    nats) services+=(nats) ;;
    kafka) services+=(tansu) ;;
    *) echo "bench-publishers.sh: unknown publisher $pub (postgres amqp mqtt http redis asynq nats kafka)" >&2; exit 2 ;;
  esac
done
ensure_services $(printf '%s\n' "${services[@]}" | sort -u)

N=${N:-20000}
RUNS=${RUNS:-3}
BATCH=${BATCH:-500}
BIN=${OUTBOX_BIN:-target/release/outbox}
PY=target/pyenv/bin/python
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
[[ -x $BIN ]] || cargo build --release -p outbox-cli
for pub in "${publishers[@]}"; do
  case $pub in
    amqp | nats | http | kafka)
      [[ -x $PY ]] || { echo "run scripts/test.sh once first (it makes $PY)" >&2; exit 1; } ;;
  esac
done

sql() { psql "$DATABASE_URL" -qAtX -v ON_ERROR_STOP=1 -c "$1"; }

amqp() { # setup|teardown name
  "$PY" - "$@" <<'PY'
import sys, pika
op, name = sys.argv[1:]
c = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2f"))
ch = c.channel()
if op == "setup":
    ch.exchange_declare(name, exchange_type="topic", durable=True)
    ch.queue_declare(name, durable=True)
    ch.queue_bind(name, name, routing_key="#")
else:
    ch.queue_delete(name)
    ch.exchange_delete(name)
c.close()
PY
}

nats_delete_stream() { # name
  "$PY" - "$1" <<'PY'
import asyncio, sys, nats
async def main():
    nc = await nats.connect("nats://127.0.0.1:4222")
    await nc.jetstream().delete_stream(sys.argv[1])
    await nc.close()
asyncio.run(main())
PY
}

# A Tansu broker of its own for one run, with the run's topic.
tansu_start() { # dir
  port_open 19092 && { echo "bench-publishers.sh: port 19092 is taken" >&2; return 1; }
  (cd "$1" && exec "$(tansu_bin)" broker --listener-url tcp://127.0.0.1:19092 \
    --advertised-listener-url tcp://127.0.0.1:19092 --storage-engine sqlite://tansu.db \
    >broker.log 2>&1) &
  tansu_pid=$!
  wait_port Tansu 19092 30
  "$(tansu_bin)" topic create --broker tcp://127.0.0.1:19092 orders.created --partitions 6 >/dev/null
}

run_once() { # publisher -> prints msgs/s
  local pub=$1 tag schema url sink_pid="" relay_pid rate tansu_pid="" tansu_dir=""
  tag=$(printf '%08x' $((RANDOM * 32768 + RANDOM)))
  schema="bench_${pub}_$tag"
  case $pub in
    postgres) url=postgres ;;
    amqp) amqp setup "bench_$tag"; url="amqp://guest:guest@127.0.0.1:5672/%2f?exchange=bench_$tag" ;;
    mqtt) url="mqtt://127.0.0.1:1883?prefix=bench/$tag" ;;
    redis) url="redis://127.0.0.1:6379?stream_prefix=bench_$tag:" ;;
    asynq) url="asynq://127.0.0.1:6379?queue=bench_$tag" ;;
    nats) url="nats://127.0.0.1:4222?subject_prefix=bench_$tag.&create_stream=BENCH_$tag" ;;
    kafka) tansu_dir=$(mktemp -d); tansu_start "$tansu_dir" >&2; url="kafka://127.0.0.1:19092" ;;
    http)
      "$PY" scripts/webhook_sink.py 18765 & sink_pid=$!
      wait_port webhook-sink 18765 10
      url="http://127.0.0.1:18765/hook" ;;
  esac
  $BIN --schema "$schema" migrate >/dev/null
  sql "INSERT INTO $schema.messages (event_type, aggregate_type, aggregate_id, topic, payload)
       SELECT 'order.created', 'order', g::text, 'orders.created', jsonb_build_object('order_id', g, 'total', 1999)
       FROM generate_series(1, $N) g"
  local start end
  start=$(date +%s.%N)
  OUTBOX_WEBHOOK_SECRET=whsec_YmVuY2gtc2VjcmV0LWJ5dGVz $BIN --schema "$schema" relay \
    --publisher "$url" --batch-size "$BATCH" --relay-id "bench-$tag" 2>/dev/null &
  relay_pid=$!
  until [[ $(sql "SELECT count(*) FROM $schema.all_messages WHERE status = 'sent'") -ge $N ]]; do
    if ! kill -0 "$relay_pid" 2>/dev/null; then echo "relay exited early" >&2; return 1; fi
    sleep 0.05
  done
  end=$(date +%s.%N)
  kill -INT "$relay_pid"; wait "$relay_pid" || true
  [[ -n $sink_pid ]] && { kill "$sink_pid"; wait "$sink_pid" 2>/dev/null || true; }
  [[ $pub == amqp ]] && amqp teardown "bench_$tag"
  [[ $pub == redis ]] && redis-cli DEL "bench_$tag:orders.created" >/dev/null
  if [[ $pub == asynq ]]; then
    redis-cli --scan --pattern "asynq:{bench_$tag}:*" | xargs -r -n 1000 redis-cli DEL >/dev/null
    redis-cli SREM asynq:queues "bench_$tag" >/dev/null
  fi
  [[ $pub == nats ]] && nats_delete_stream "BENCH_$tag"
  if [[ -n $tansu_pid ]]; then
    kill -9 "$tansu_pid"; wait "$tansu_pid" 2>/dev/null || true; rm -rf "$tansu_dir"
  fi
  sql "DROP SCHEMA $schema CASCADE" 2>/dev/null
  awk -v n="$N" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f\n", n / (e - s) }'
}

# The Kafka broker alone: a fresh broker, the same topic and N records, no relay.
kafka_alone() { # -> prints msgs/s
  local tansu_pid="" tansu_dir rate
  tansu_dir=$(mktemp -d)
  tansu_start "$tansu_dir" >&2
  rate=$("$PY" scripts/kafka_produce.py 127.0.0.1:19092 orders.created "$N") || rate=failed
  kill -9 "$tansu_pid"; wait "$tansu_pid" 2>/dev/null || true; rm -rf "$tansu_dir"
  echo "$rate"
}

report() { # label runner
  local rates=() median i
  for ((i = 0; i < RUNS; i++)); do rates+=("$($2)"); done
  median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
  echo "$1: ${median} msg/s (median of $RUNS; runs: ${rates[*]}; N=$N, batch=$BATCH)"
}

for pub in "${publishers[@]}"; do
  report "$pub" "run_once $pub"
  if [[ $pub == kafka ]]; then report "kafka broker alone" kafka_alone; fi
done
