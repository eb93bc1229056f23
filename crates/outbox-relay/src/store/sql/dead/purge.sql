-- Deletes the dead rows that died longer ago than some seconds.
--
-- Parameters: $1 float8 seconds.
--
-- Returns the rows deleted, as rows affected.
DELETE FROM {schema}.messages
 WHERE status = 'dead'
   AND dead_at < now() - $1::float8 * interval '1 second'
