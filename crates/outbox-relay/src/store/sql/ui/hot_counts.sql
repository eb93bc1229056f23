-- The operator page's counts: the hot table in one pass, by topic and
-- status, with the rows in flight also by the relay that holds them. The
-- hot table holds only unsent rows (sent ones move to messages_sent) and no
-- index names status (migration 5), so this is the same single pass as the
-- relay's own backlog gauge (stats/backlog.sql).
--
-- Returns topic (text), status (text), relay (text or NULL), count (int8),
-- last_claim (timestamptz or NULL).
SELECT topic, status,
       CASE WHEN status = 'processing' THEN locked_by END AS relay,
       count(*) AS count, max(locked_at) AS last_claim
  FROM {schema}.messages GROUP BY 1, 2, 3
