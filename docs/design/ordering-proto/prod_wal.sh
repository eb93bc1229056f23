#!/bin/bash
P="psql -h 127.0.0.1 -U postgres -d ordering_proto -Atq"
for round in 1 2 3; do
 for v in none text; do
  $P -c "TRUNCATE outbox.messages, outbox.messages_sent" -c "DROP INDEX IF EXISTS outbox.messages_aggregate_idx"
  [ $v = text ] && $P -c "CREATE INDEX messages_aggregate_idx ON outbox.messages (aggregate_type, aggregate_id, id) WHERE dead_at IS NULL"
  $P -f load_spread_uuid.sql > /dev/null
  l0=$($P -c "select pg_current_wal_lsn()")
  out=$(PGOPTIONS="-c synchronous_commit=off" pgbench -h 127.0.0.1 -U postgres -n -M prepared -f insert.sql -c 4 -j 2 -t 5000 ordering_proto 2>&1)
  l1=$($P -c "select pg_current_wal_lsn()")
  wal=$($P -c "select round(pg_wal_lsn_diff('$l1','$l0')/20000.0)")
  tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+')
  $P -c "CHECKPOINT"
  bt=$($P -c "EXPLAIN (ANALYZE, FORMAT JSON) INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) SELECT 'bench.event', 'order', md5((g % 10000)::text)::uuid::text, 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100)) FROM generate_series(1, 20000) g" | grep -oP '"Execution Time": \K[0-9.]+')
  echo "round=$round index=$v single_row_tps_async=$tps wal_bytes_per_row=$wal bulk_20k_insert_ms=$bt"
 done
done
