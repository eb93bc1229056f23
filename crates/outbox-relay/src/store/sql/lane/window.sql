-- DRAFT (docs/design/insert-only.md, phase 2): where lane $1 reads
-- next. Its last position, or with $2 (a tick: the last batch came back
-- short, so the window is drained) the next window: what committed after
-- the old `hi` and is visible now. Every row of the new window has an
-- xid at or above the old `hi`'s xmin (anything older was visible to it,
-- or never committed), so the id walk restarts below the lowest such id,
-- found through messages_xid_idx.
--
-- Parameters: $1 int4 the lane, $2 bool tick.
--
-- Returns seq (int8) the position read at, lo and hi (text, pg_snapshot)
-- the window, after_id (int8) the walk's start (exclusive), and busy
-- (bool): on a tick, whether the new window holds a row of any lane. A
-- lane that finds nothing of its own settles the tick only then, so a
-- quiet lane does not read an ever wider window while others are busy,
-- and a quiet database costs no write. Then retries_due (bool): a row of
-- `retries` is due for the claim path, whose pipelines the lanes wake
-- instead of polling on their own.
SELECT p.seq,
       (CASE WHEN $2 THEN p.hi ELSE p.lo END)::text AS lo,
       (CASE WHEN $2 THEN pg_current_snapshot() ELSE p.hi END)::text AS hi,
       CASE WHEN $2
            THEN coalesce((SELECT min(m.id) - 1 FROM {schema}.messages m
                            WHERE m.xid >= pg_snapshot_xmin(p.hi)), p.last_id)
            ELSE p.last_id END AS after_id,
       $2 AND EXISTS (SELECT 1 FROM {schema}.messages m
                       WHERE m.xid >= pg_snapshot_xmin(p.hi)
                         AND pg_visible_in_snapshot(m.xid, pg_current_snapshot())
                         AND NOT pg_visible_in_snapshot(m.xid, p.hi)) AS busy,
       EXISTS (SELECT 1 FROM {schema}.retries r
                WHERE r.dead_at IS NULL AND r.status IN ('pending', 'failed')
                  AND r.next_run_at <= now()) AS retries_due
  FROM {schema}.lane_positions p
 WHERE p.lane = $1
 ORDER BY p.seq DESC LIMIT 1
