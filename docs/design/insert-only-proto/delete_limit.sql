-- Today's reference: one statement deletes the 500 lowest rows and writes
-- them to the sink (what `outbox bench baseline` calls the DELETE limit).
WITH d AS (DELETE FROM proto.hot WHERE id IN (SELECT id FROM proto.hot WHERE status = 'pending' ORDER BY id LIMIT 500) RETURNING *)
INSERT INTO proto.sink SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at, now() FROM d;
