-- A tick: the lane's next window is what committed after the last one.
-- Its rows all have an xid at or above the old `hi`'s xmin (anything older
-- was visible to it, or never committed), so the lowest such id is where
-- the next window's id walk starts. Run when a batch comes back short.
UPDATE proto.cursor c
   SET lo = c.hi, hi = pg_current_snapshot(),
       last_id = coalesce((SELECT min(id) - 1 FROM proto.messages m WHERE m.xid >= pg_snapshot_xmin(c.hi)), c.last_id)
 WHERE lane = 0;
