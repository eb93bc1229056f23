-- Whether the sink table exists with every envelope column, so that
-- create.sql would change nothing. Checked first because create.sql would
-- fail anyway for a least-privilege role: PostgreSQL checks the CREATE
-- right of CREATE SCHEMA IF NOT EXISTS and CREATE TABLE IF NOT EXISTS
-- before it looks whether the object exists. to_regclass is NULL for a
-- missing schema or table.
--
-- Returns ready (bool).
SELECT count(*) = 6 AS ready FROM pg_attribute
 WHERE attrelid = to_regclass('{schema}.published_events')
   AND attname IN ('headers', 'event_type', 'event_version',
                   'aggregate_type', 'aggregate_id', 'enqueued_at')
   AND NOT attisdropped
