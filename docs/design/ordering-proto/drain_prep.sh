#!/bin/bash
# interleaved claim+settle drains; prints msg/s
P="psql -h 127.0.0.1 -U postgres -d ordering_proto -Atq"
idx() { $P -c "DROP INDEX IF EXISTS outbox.messages_aggregate_idx"; [ "$1" = yes ] && $P -c "CREATE INDEX messages_aggregate_idx ON outbox.messages (aggregate_type, aggregate_id, id) WHERE dead_at IS NULL"; }
drain() { # variant script load clients tx
  local v=$1 load=$2 c=$3 t=$4 index=$5
  $P -c "TRUNCATE outbox.messages, outbox.messages_sent"; idx $index
  $P -f $load >/dev/null
  local out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -f $v.sql -c $c -j $c -t $t -D floor=0 ordering_proto 2>&1)
  local tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+'); local err=$(echo "$out" | grep -c error)
  local sent=$($P -c "select count(*) from outbox.messages_sent")
  local el=$(echo "$c * $t / $tps" | bc -l)
  printf "round=%s variant=%s load=%s clients=%s sent=%s elapsed=%.2f msg_per_s=%.0f errors=%s\n" $ROUND $v $load $c $sent $el $(echo "$sent / $el" | bc -l) $err
}
for ROUND in 1 2 3; do
  drain v0p load_spread_uuid.sql 4 100 no
  drain v3p load_spread_uuid.sql 4 100 yes
  drain v3p load_one_uuid.sql 1 80 yes
done
