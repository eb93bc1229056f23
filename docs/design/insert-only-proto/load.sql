-- 200,000 messages over 10,000 aggregates (the ordering bench's spread),
-- into both shapes; the tick window opens before the load and closes after.
TRUNCATE proto.messages, proto.hot, proto.sink, proto.cursor;
INSERT INTO proto.cursor (lane, lo, hi) SELECT l, pg_current_snapshot(), pg_current_snapshot() FROM generate_series(0, 3) l;
INSERT INTO proto.messages (event_type, aggregate_type, aggregate_id, topic, payload)
SELECT 'bench.event', 'bench', (g % 10000)::text, 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100))
  FROM generate_series(1, :n) g;
INSERT INTO proto.hot (id, xid, event_id, event_type, aggregate_type, aggregate_id, topic, payload)
SELECT id, xid, event_id, event_type, aggregate_type, aggregate_id, topic, payload FROM proto.messages;
UPDATE proto.cursor SET hi = pg_current_snapshot();
VACUUM ANALYZE proto.messages; VACUUM ANALYZE proto.hot; CHECKPOINT;
