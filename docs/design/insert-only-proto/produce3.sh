#!/usr/bin/env bash
# Third round (docs/design/insert-only.md): what the draft migration 12
# costs a producer. One-row transactions (the library's INSERT shape) for
# 10 s on 2 clients into: today's table (migrations 1-11), the draft's
# insert-only table, and the draft's without messages_lane_idx; rounds
# interleaved. Needs the `outbox` binary (cargo build --release) and pgbench.
# Usage: produce3.sh [rounds] (default 3). Prints one line per run.
set -euo pipefail
ROUNDS=${1:-3}
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUTBOX=${OUTBOX:-$ROOT/target/release/outbox}
DRAFT=$ROOT/crates/outbox/src/sql/next/0012_insert_only.sql
cleanup() { for s in p3_today p3_draft p3_nolane; do psql -q "$URL" -c "DROP SCHEMA IF EXISTS $s CASCADE" 2>/dev/null; done; rm -f /tmp/p3_*.sql; }
trap cleanup EXIT
cleanup
for s in p3_today p3_draft p3_nolane; do "$OUTBOX" --database-url "$URL" --schema $s migrate >/dev/null; done
for s in p3_draft p3_nolane; do sed "s/{schema}/$s/g" "$DRAFT" | psql -q "$URL" -v ON_ERROR_STOP=1 >/dev/null 2>&1; done
psql -q "$URL" -c "DROP INDEX p3_nolane.messages_lane_idx"
for s in p3_today p3_draft p3_nolane; do
  cat > /tmp/$s.sql <<SQL
INSERT INTO $s.messages (event_type, aggregate_type, aggregate_id, topic, payload)
VALUES ('bench.event', 'bench', (random() * 10000)::int::text, 'bench', '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}');
SQL
done
for r in $(seq 1 "$ROUNDS"); do
  for s in p3_today p3_draft p3_nolane; do
    tps=$(pgbench -n -c 2 -j 2 -T 10 -f /tmp/$s.sql "$URL" 2>/dev/null | grep -oP 'tps = \K[0-9.]+')
    printf "round=%s produce %-10s tx_per_s=%.0f\n" "$r" "${s#p3_}" "$tps"
  done
done
