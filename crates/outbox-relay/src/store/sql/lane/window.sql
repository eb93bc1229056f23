-- DRAFT (docs/design/insert-only.md, phase 2; used by the test
-- insert_only_draft until the relay reads lanes): where lane $1 reads
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
-- the window, after_id (int8) the walk's start (exclusive).
SELECT p.seq,
       (CASE WHEN $2 THEN p.hi ELSE p.lo END)::text AS lo,
       (CASE WHEN $2 THEN pg_current_snapshot() ELSE p.hi END)::text AS hi,
       CASE WHEN $2
            THEN coalesce((SELECT min(m.id) - 1 FROM {schema}.messages m
                            WHERE m.xid >= pg_snapshot_xmin(p.hi)), p.last_id)
            ELSE p.last_id END AS after_id
  FROM {schema}.lane_positions p
 WHERE p.lane = $1
 ORDER BY p.seq DESC LIMIT 1
