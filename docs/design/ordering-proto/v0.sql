WITH c AS (SELECT id FROM outbox.messages WHERE id >= :floor AND status IN ('pending', 'failed') AND next_run_at <= now() AND dead_at IS NULL ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED),
 s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap),
 claimed AS (UPDATE outbox.messages m SET status = 'processing', attempts = m.attempts + 1, locked_by = 'c' || :client_id, locked_at = now()
  FROM c, s WHERE m.id = c.id
  RETURNING m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id, m.topic, m.payload, m.headers, m.attempts, m.created_at, m.locked_at, pg_snapshot_xmin(s.snap)::text::int8 AS xmin, pg_snapshot_xmax(s.snap)::text::int8 AS xmax)
SELECT coalesce(min(id), :floor) AS floor, quote_literal(coalesce(array_agg(id)::text, '{}')) AS ids, count(*) AS got FROM claimed \gset
WITH sent AS (DELETE FROM outbox.messages WHERE id = ANY(:ids::int8[]) AND status = 'processing' AND locked_by = 'c' || :client_id RETURNING *) INSERT INTO outbox.messages_sent (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, sent_at) SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, now() FROM sent;
