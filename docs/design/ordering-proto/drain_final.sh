#!/bin/bash
# all designs in the same interleaved rounds
P="psql -h 127.0.0.1 -U postgres -d ordering_proto -Atq"
drain() { # name script load clients tx index blockedfile
  local name=$1 v=$2 load=$3 c=$4 t=$5 index=$6 bl=$(cat $7)
  $P -c "TRUNCATE outbox.messages, outbox.messages_sent" -c "DROP INDEX IF EXISTS outbox.messages_aggregate_idx"
  [ $index = yes ] && $P -c "CREATE INDEX messages_aggregate_idx ON outbox.messages (aggregate_type, aggregate_id, id) WHERE dead_at IS NULL"
  $P -f $load >/dev/null
  local out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -f $v.sql -c $c -j $c -t $t -D floor=0 -D blocked="$bl" -D lo=0 -D hi=1023 ordering_proto 2>&1)
  local tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+'); local err=$(echo "$out" | grep -c error)
  local sent=$($P -c "select count(*) from outbox.messages_sent")
  local el=$(echo "$c * $t / $tps" | bc -l)
  printf "round=%s name=%s sent=%s elapsed=%.2f msg_per_s=%.0f errors=%s\n" $ROUND $name $sent $el $(echo "$sent / $el" | bc -l) $err
}
for ROUND in 1 2 3; do
  drain spread_today v0p load_spread_uuid.sql 4 100 no blocked0.txt
  drain spread_a v3p load_spread_uuid.sql 4 100 yes blocked0.txt
  drain spread_b_empty v9p load_spread_uuid.sql 4 100 no blocked0.txt
  drain spread_b_98 v9p load_spread_uuid.sql 4 100 no blocked64.txt
  drain one_a v3p load_one_uuid.sql 1 80 yes blocked0.txt
  drain one_b v9p load_one_uuid.sql 1 80 no blocked0.txt
done
