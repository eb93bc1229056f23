-- How many sent rows are older than the cutoff.
--
-- Parameters: $1 timestamptz cutoff (cutoff.sql).
--
-- Returns count (int8).
SELECT count(*) AS count FROM {schema}.messages_sent WHERE sent_at < $1
