-- The backlog gauges, run every few seconds by every relay: the counts of
-- the hot table by status.
--
-- The hot table holds only unsent rows (sent ones move to messages_sent);
-- no index names status (migration 5 keeps claims HOT), so the live rows
-- are counted in one pass over the table, and the rows with a dead_at from
-- the dead index. Each row counts under its status: one written dead by
-- hand without a dead_at is dead (seen in the pass), one left pending or
-- failed with a dead_at is still waiting (seen in the index), so no row the
-- relay would never write goes uncounted.
--
-- Returns pending, processing, failed, dead (int8).
SELECT h.pending + d.pending AS pending,
       h.processing + d.processing AS processing,
       h.failed + d.failed AS failed, h.dead + d.dead AS dead
  FROM (SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
               count(*) FILTER (WHERE status = 'processing') AS processing,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               count(*) FILTER (WHERE status = 'dead') AS dead
          FROM {schema}.messages WHERE dead_at IS NULL) h,
       (SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
               count(*) FILTER (WHERE status = 'processing') AS processing,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               count(*) FILTER (WHERE status NOT IN ('pending', 'processing', 'failed'))
                 AS dead
          FROM {schema}.messages WHERE dead_at IS NOT NULL) d
