-- The floor of what an outbox must do, without commit-order safety: read
-- 500 rows above the cursor by id, write them to the sink, move the cursor.
WITH cur AS MATERIALIZED (SELECT last_id FROM proto.cursor WHERE lane = 0 FOR UPDATE),
b AS (SELECT m.* FROM proto.messages m WHERE m.id > (SELECT last_id FROM cur) ORDER BY m.id LIMIT 500),
ins AS (INSERT INTO proto.sink SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at, now() FROM b RETURNING id)
UPDATE proto.cursor c SET last_id = coalesce((SELECT max(id) FROM ins), c.last_id) WHERE c.lane = 0;
