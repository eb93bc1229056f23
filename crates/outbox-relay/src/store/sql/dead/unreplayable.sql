-- How many matching dead rows replay.sql skips: back in pending they would
-- violate a CHECK (see replay.sql), so they stay dead until an operator
-- fixes them.
--
-- Parameters: $1 int8[] ids (NULL: any), $2 text topic (NULL: any),
-- $3 text filter (NULL: any; see newest.sql).
--
-- Returns count (int8).
SELECT count(*) AS count
  FROM {schema}.messages
 WHERE status = 'dead'
   AND ($1::int8[] IS NULL OR id = ANY($1))
   AND ($2::text IS NULL OR topic = $2)
   AND ($3::text IS NULL OR strpos(lower(coalesce(dead_reason, '') || ' ' ||
          coalesce(last_error, '') || ' ' || event_type || ' ' || aggregate_id || ' ' ||
          payload::text), lower($3)) > 0)
   AND NOT ({schema}.headers_valid(headers)
            AND {schema}.message_state_problem('pending', NULL, NULL, NULL, 0, now(), created_at) IS NULL)
