#!/bin/bash
# Second round (docs/design/insert-only.md, "Settled by measurement"):
#  - tick_batch.sql (the first round's window) against held_batch.sql (the
#    same window with the rare-path probe and the cursor as a log), with no
#    aggregate held and with 100 of the 10,000 held (1 % of the rows go to
#    `retries`), and held_batch with a REPEATABLE READ transaction open;
#  - producers: one-row transactions for 10 s on 2 clients into the plain
#    table and into the table partitioned by id range.
# Usage: drain2.sh [rounds] (database `outbox_proto31`, dropped at exit).
set -euo pipefail
cd "$(dirname "$0")"
DB=outbox_proto31 N=${N:-200000} ROUNDS=${1:-3}
P="psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -Atq"
$P -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
trap '$P -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"' EXIT
$P -d $DB -f schema.sql -f schema2.sql >/dev/null
drain() { # name script held_aggregates [held]
  local holder=""
  if [[ ${4:-} == held ]]; then
    $P -d $DB -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
    holder=$!
    sleep 0.5
  fi
  $P -d $DB -c "TRUNCATE proto.retries, proto.batches" \
     -c "INSERT INTO proto.batches (lane, seq, lo, hi, last_id) VALUES (0, 0, pg_current_snapshot(), pg_current_snapshot(), 0)" >/dev/null
  $P -d $DB -v n=$N -f load.sql >/dev/null
  $P -d $DB -c "UPDATE proto.batches SET hi = (SELECT hi FROM proto.cursor WHERE lane = 0)" \
     -c "INSERT INTO proto.retries (id, event_type, aggregate_type, aggregate_id, topic, payload, status)
         SELECT -a, 'bench.event', 'bench', a::text, 'bench', '{}', 'failed' FROM generate_series(1, $3) a" \
     -c "VACUUM ANALYZE proto.retries" -c "VACUUM ANALYZE proto.batches" >/dev/null
  local t=$((N / 500))
  local out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -f "$2" -t $t $DB 2>&1)
  local tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+')
  local sent=$($P -d $DB -c "SELECT count(*) FROM proto.sink")
  local diverted=$($P -d $DB -c "SELECT count(*) FROM proto.retries WHERE id > 0")
  sleep 1
  local dead=$($P -d $DB -c "SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE relname IN ('messages', 'cursor', 'batches')")
  [[ -n $holder ]] && $P -d $DB -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$DB' AND query LIKE '%pg_sleep(3600)%'" >/dev/null && { wait $holder 2>/dev/null || true; }
  printf "round=%s %-11s held_aggregates=%-3s %-4s sent=%s diverted=%s msg_per_s=%.0f dead_tuples=%s\n" "$ROUND" "$1" "$3" "${4:-}" \
    "$sent" "$diverted" "$(echo "($sent + $diverted) / ($t / $tps)" | bc -l)" "$dead"
}
produce() { # name script
  $P -d $DB -c "TRUNCATE proto.messages, proto.pmessages" -c "CHECKPOINT" >/dev/null
  local out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -f "$2" -c 2 -j 2 -T 10 $DB 2>&1)
  printf "round=%s produce %-12s tx_per_s=%.0f\n" "$ROUND" "$1" "$(echo "$out" | grep -oP 'tps = \K[0-9.]+')"
}
for ROUND in $(seq 1 "$ROUNDS"); do
  drain tick_batch tick_batch.sql 0
  drain held_batch held_batch.sql 0
  drain held_batch held_batch.sql 100
  drain held_batch held_batch.sql 0 held
  produce plain produce_plain.sql
  produce partitioned produce_partitioned.sql
done
