#!/bin/bash
# interleaved producer INSERT cost: none / text index / hash index, 3 rounds
P="psql -h 127.0.0.1 -U postgres -d ordering_proto -Atq"
setidx() {
  $P -c "DROP INDEX IF EXISTS outbox.messages_aggregate_idx" -c "DROP INDEX IF EXISTS outbox.messages_aggregate_hash_idx"
  case $1 in
    text) $P -c "CREATE INDEX messages_aggregate_idx ON outbox.messages (aggregate_type, aggregate_id, id) WHERE dead_at IS NULL";;
    hash) $P -c "CREATE INDEX messages_aggregate_hash_idx ON outbox.messages (hashtextextended(aggregate_type || '/' || aggregate_id, 0), id) WHERE dead_at IS NULL";;
  esac
}
for round in 1 2 3; do
  for v in none text hash; do
    $P -c "TRUNCATE outbox.messages, outbox.messages_sent"
    setidx $v
    $P -f load_spread_uuid.sql >/dev/null
    tps=$(pgbench -h 127.0.0.1 -U postgres -n -f insert.sql -c 4 -j 2 -T 15 ordering_proto 2>&1 | grep -oP 'tps = \K[0-9.]+')
    echo "round=$round index=$v insert_tps=$tps"
  done
done
