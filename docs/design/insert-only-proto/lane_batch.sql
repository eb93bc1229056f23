-- tick_batch.sql for one of four lanes (pgbench's client id): each lane
-- takes the window's rows of its aggregates (a hash of the aggregate, as
-- today's buckets) and keeps its own cursor, so four pipelines drain in
-- parallel; each lane's scan also reads the other lanes' rows.
WITH cur AS MATERIALIZED (SELECT lo, hi, last_id FROM proto.cursor WHERE lane = :client_id FOR UPDATE),
b AS (SELECT m.* FROM proto.messages m
       WHERE m.id > (SELECT last_id FROM cur)
         AND (hashtext(m.aggregate_type || '/' || m.aggregate_id) & 3) = :client_id
         AND pg_visible_in_snapshot(m.xid, (SELECT hi FROM cur))
         AND NOT pg_visible_in_snapshot(m.xid, (SELECT lo FROM cur))
       ORDER BY m.id LIMIT 500),
ins AS (INSERT INTO proto.sink SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at, now() FROM b RETURNING id)
UPDATE proto.cursor c SET last_id = coalesce((SELECT max(id) FROM ins), c.last_id) WHERE c.lane = :client_id;
