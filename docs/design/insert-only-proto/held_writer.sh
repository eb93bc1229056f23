#!/usr/bin/env bash
# Third round (docs/design/insert-only.md): a writer transaction held open
# (one row inserted, then 60 s asleep) against none, while 100,000 rows
# commit in 200 transactions of 500 and an `outbox relay` process (the
# draft migration, lanes, the postgres sink) passes them: seconds from the
# last commit to the last row published. Needs `cargo build --release`.
# Usage: held_writer.sh (two rounds, interleaved).
set -u
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
O=${OUTBOX:-$ROOT/target/release/outbox}
run() { # held(0/1)
  S=held_x; psql -q $URL -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
  $O --database-url $URL --schema $S migrate >/dev/null
  sed "s/{schema}/$S/g" $ROOT/crates/outbox/src/sql/next/0012_insert_only.sql | psql -q $URL -v ON_ERROR_STOP=1 >/dev/null 2>&1
  if [ "$1" = 1 ]; then
    psql -q $URL -c "BEGIN; INSERT INTO $S.messages (event_type, aggregate_type, aggregate_id, topic, payload) VALUES ('e','held','0','bench','{}'); SELECT pg_sleep(60); COMMIT;" >/dev/null 2>&1 &
    HP=$!; sleep 0.5
  fi
  RUST_LOG=warn $O --database-url $URL --schema $S relay >/dev/null 2>/tmp/held_relay.log &
  RP=$!; sleep 1
  start=$(date +%s.%N)
  for i in $(seq 1 200); do
    psql -q $URL -c "INSERT INTO $S.messages (event_type, aggregate_type, aggregate_id, topic, payload) SELECT 'e', 'bench', (g % 10000)::text, 'bench', '{\"pad\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}' FROM generate_series(1, 500) g" >/dev/null
  done
  produced=$(date +%s.%N)
  while [ "$(psql -Atq $URL -c "SELECT count(*) FROM $S.published_events")" -lt 100000 ]; do sleep 0.05; done
  done_at=$(date +%s.%N)
  echo "held=$1 produce_s=$(echo "$produced - $start" | bc) drained_s=$(echo "$done_at - $start" | bc) lag_after_producers_s=$(echo "$done_at - $produced" | bc)"
  kill $RP; wait $RP 2>/dev/null
  [ "$1" = 1 ] && { kill $HP 2>/dev/null; psql -q $URL -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()" >/dev/null; }
  sleep 0.5
  psql -q $URL -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
}
run 0; run 1; run 0; run 1
