#!/bin/bash
# Drains the same 200,000-message backlog with each statement, one
# connection, batch 500, in interleaved rounds; prints msg/s per run and
# the writes each left on `messages`/`hot` (pg_stat_user_tables).
# Usage: drain.sh [rounds] (a database `outbox_proto31` is made and dropped).
# HOLD=1: each run also with a REPEATABLE READ transaction held open from
# before the load to the end of the drain (it holds VACUUM's horizon).
set -euo pipefail
cd "$(dirname "$0")"
DB=outbox_proto31 N=${N:-200000} ROUNDS=${1:-3}
P="psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -Atq"
$P -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
trap '$P -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"' EXIT
$P -d $DB -f schema.sql >/dev/null
run() { # name script [held]
  local holder=""
  if [[ ${3:-} == held ]]; then
    $P -d $DB -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
    holder=$!
    sleep 0.5
  fi
  $P -d $DB -v n=$N -f load.sql >/dev/null
  local before=$($P -d $DB -c "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname IN ('messages', 'hot')" | paste -sd+ | bc)
  # lanes: 4 clients, each batches until its lane is empty (about N/4
  # rows each, 500 a batch, some batches short): a few extra transactions
  local c=1 t=$((N / 500))
  [[ $1 == lanes ]] && c=4 t=$((N / 2000 + 20))
  local out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -f "$2" -c $c -j $c -t $t $DB 2>&1)
  local tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+')
  t=$((t * c))
  local sent=$($P -d $DB -c "SELECT count(*) FROM proto.sink")
  sleep 1 # the statistics collector
  local after=$($P -d $DB -c "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname IN ('messages', 'hot')" | paste -sd+ | bc)
  local dead=$($P -d $DB -c "SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE relname IN ('messages', 'hot')")
  [[ -n $holder ]] && $P -d $DB -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$DB' AND query LIKE '%pg_sleep(3600)%'" >/dev/null && { wait $holder 2>/dev/null || true; }
  printf "round=%s %-14s %-5s sent=%s msg_per_s=%.0f upd_del_per_msg=%.3f dead_tuples=%s\n" "$ROUND" "$1" "${3:-}" "$sent" \
    "$(echo "$sent / ($t / $tps)" | bc -l)" "$(echo "($after - $before) / $sent" | bc -l)" "$dead"
}
for ROUND in $(seq 1 "$ROUNDS"); do
  run delete_limit delete_limit.sql
  run tick_batch tick_batch.sql
  run id_range id_range.sql
  run lanes lane_batch.sql
  if [[ ${HOLD:-0} == 1 ]]; then
    run delete_limit delete_limit.sql held
    run tick_batch tick_batch.sql held
  fi
done
