-- Insert-only: the next 500 rows of the lane's window, by id, among rows
-- committed after snapshot `lo` and visible in snapshot `hi`; written to the
-- sink, and the lane's cursor moved past them. No write on `messages`.
-- The scan walks the id index from the cursor and the visibility tests
-- pick the window's rows; where a window starts by id is found once per
-- tick (tick.sql), through the xid index. With xid bounds here as well the
-- planner took the xid index and sorted the whole window every batch
-- (11,000 msg/s). The cursor's
-- values are scalar subqueries (init plans), so the id bound is an index
-- condition: as a join, the scan started at the first id every batch.
WITH cur AS MATERIALIZED (SELECT lo, hi, last_id FROM proto.cursor WHERE lane = 0 FOR UPDATE),
b AS (SELECT m.* FROM proto.messages m
       WHERE m.id > (SELECT last_id FROM cur)
         AND pg_visible_in_snapshot(m.xid, (SELECT hi FROM cur))
         AND NOT pg_visible_in_snapshot(m.xid, (SELECT lo FROM cur))
       ORDER BY m.id LIMIT 500),
ins AS (INSERT INTO proto.sink SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, payload, headers, created_at, now() FROM b RETURNING id)
UPDATE proto.cursor c SET last_id = coalesce((SELECT max(id) FROM ins), c.last_id) WHERE c.lane = 0;
