-- Counts by status, over the hot table and the sent table.
--
-- Returns status (text), count (int8) per status.
SELECT status, count(*) AS count FROM {schema}.messages GROUP BY status
UNION ALL SELECT 'sent', count(*) FROM {schema}.messages_sent
