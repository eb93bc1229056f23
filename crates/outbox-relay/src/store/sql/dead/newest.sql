-- Dead rows for the operator page, the newest death first: a backward walk
-- of the dead index, which stops at the limit. The reason is cut to 500
-- characters, and there is no payload: the page lists these every few
-- seconds, and a payload may be megabytes.
--
-- The text filter matches a case-insensitive substring of the reason, the
-- last error, the event type, the aggregate id or the payload's JSON text.
-- strpos, not LIKE: what an operator types is never a pattern. (The same
-- filter is in count_matching.sql, replay.sql and unreplayable.sql.)
--
-- Parameters: $1 text topic (NULL: any), $2 text filter (NULL: any),
-- $3 int8 limit.
--
-- Returns id, topic, event_type, attempts, dead_at, dead_reason.
SELECT id, topic, event_type, attempts, dead_at,
       left(dead_reason, 500) AS dead_reason
  FROM {schema}.messages
 WHERE dead_at IS NOT NULL AND status = 'dead'
   AND ($1::text IS NULL OR topic = $1)
   AND ($2::text IS NULL OR strpos(lower(coalesce(dead_reason, '') || ' ' ||
          coalesce(last_error, '') || ' ' || event_type || ' ' || aggregate_id || ' ' ||
          payload::text), lower($2)) > 0)
 ORDER BY dead_at DESC LIMIT $3
