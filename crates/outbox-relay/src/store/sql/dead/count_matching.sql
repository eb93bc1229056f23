-- How many dead rows match: what "replay all matching" would take.
--
-- Parameters: $1 text topic (NULL: any), $2 text filter (NULL: any; see
-- newest.sql).
--
-- Returns count (int8).
SELECT count(*) AS count
  FROM {schema}.messages
 WHERE status = 'dead' AND ($1::text IS NULL OR topic = $1)
   AND ($2::text IS NULL OR strpos(lower(coalesce(dead_reason, '') || ' ' ||
          coalesce(last_error, '') || ' ' || event_type || ' ' || aggregate_id || ' ' ||
          payload::text), lower($2)) > 0)
