-- The oldest message waiting to be published (pending or failed).
--
-- By id on the claimable index: the first match is the oldest (ids and
-- created_at grow together), so no scan of the backlog. The two epochs are
-- subtracted, not the times: PostgreSQL 15 refuses now() - 'infinity', and
-- a producer may write that created_at (the age is then infinite, negative
-- or not, never an error).
--
-- Parameters: $1 text topic (NULL: all).
--
-- Returns id (int8), age_seconds (float8), or no row.
SELECT id, (extract(epoch FROM now()) - extract(epoch FROM created_at))::float8 AS age_seconds
  FROM {schema}.messages
 WHERE status IN ('pending', 'failed') AND dead_at IS NULL
   AND ($1::text IS NULL OR topic = $1)
 ORDER BY id LIMIT 1
