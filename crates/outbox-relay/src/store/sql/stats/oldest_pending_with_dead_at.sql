-- The oldest row left pending or failed with a dead_at (written by hand,
-- or before a CHECK refused it): never claimed, and missed by
-- oldest_pending_age.sql, which reads the claimable index. From the dead
-- index, whose rows are few.
--
-- Parameters: $1 text topic (NULL: all).
--
-- Returns id (int8), age_seconds (float8, as in oldest_pending_age.sql),
-- or no row.
SELECT id, (extract(epoch FROM now()) - extract(epoch FROM created_at))::float8 AS age_seconds
  FROM {schema}.messages
 WHERE dead_at IS NOT NULL AND status IN ('pending', 'failed')
   AND ($1::text IS NULL OR topic = $1)
 ORDER BY id LIMIT 1
