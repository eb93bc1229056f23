-- Counts by topic and status over the hot table, messages_sent and
-- archived_messages (status archived_sent / archived_dead). A full count,
-- for outbox stats only.
--
-- Parameters: $1 text topic (NULL: all).
--
-- Returns topic (text), status (text), count (int8).
SELECT topic, status, count(*) AS count FROM {schema}.messages
 WHERE $1::text IS NULL OR topic = $1 GROUP BY topic, status
UNION ALL
SELECT topic, 'sent', count(*) FROM {schema}.messages_sent
 WHERE $1::text IS NULL OR topic = $1 GROUP BY topic
UNION ALL
SELECT topic, 'archived_' || status, count(*) FROM {schema}.archived_messages
 WHERE $1::text IS NULL OR topic = $1 GROUP BY topic, status
