-- The age of the oldest claimable message.
--
-- Returns age_seconds (float8), or no row when none waits.
SELECT extract(epoch FROM now() - created_at)::float8 AS age_seconds
  FROM {schema}.messages
 WHERE status IN ('pending', 'failed') AND dead_at IS NULL
 ORDER BY id LIMIT 1
