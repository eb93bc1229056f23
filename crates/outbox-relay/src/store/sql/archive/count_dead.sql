-- How many dead rows died before the cutoff.
--
-- Parameters: $1 timestamptz cutoff (cutoff.sql).
--
-- Returns count (int8).
SELECT count(*) AS count FROM {schema}.messages
 WHERE status = 'dead' AND dead_at < $1
