-- tick_batch.sql with the rare path and the cursor as a log: a row whose
-- aggregate is held (a live row in `retries`) is copied to `retries`, the
-- others to the sink, and the batch's end is inserted as the lane's next
-- position. One index probe into `retries` per row.
WITH cur AS MATERIALIZED (SELECT lo, hi, last_id, seq FROM proto.batches WHERE lane = 0 ORDER BY seq DESC LIMIT 1),
b AS MATERIALIZED (SELECT m.*, EXISTS (SELECT 1 FROM proto.retries r WHERE r.aggregate_type = m.aggregate_type
                                          AND r.aggregate_id = m.aggregate_id AND r.dead_at IS NULL) AS held
       FROM proto.messages m
       WHERE m.id > (SELECT last_id FROM cur)
         AND pg_visible_in_snapshot(m.xid, (SELECT hi FROM cur))
         AND NOT pg_visible_in_snapshot(m.xid, (SELECT lo FROM cur))
       ORDER BY m.id LIMIT 500),
ins AS (INSERT INTO proto.sink SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at, now()
          FROM b WHERE NOT held RETURNING id),
div AS (INSERT INTO proto.retries (id, xid, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at)
        SELECT id, xid, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at
          FROM b WHERE held RETURNING id)
INSERT INTO proto.batches (lane, seq, lo, hi, last_id)
SELECT 0, cur.seq + 1, cur.lo, cur.hi, coalesce((SELECT max(id) FROM b), cur.last_id) FROM cur;
