-- Replay in one statement: each matching dead row goes back to pending
-- with attempts 0, due now, its dead fields and last error cleared; what it
-- died of is recorded in dead_replays by the same statement.
--
-- Only a row that may go back to pending as the replay writes it: its
-- headers pass migration 6's rule and its created_at migration 10's (the
-- rest of the state is what the replay writes). A row that breaks either
-- stays dead until fixed (unreplayable.sql counts them): back in pending
-- it would violate a CHECK and fail the whole statement.
--
-- Parameters: $1 int8[] ids (NULL: any), $2 text topic (NULL: any),
-- $3 text replayed_by (NULL: the database user), $4 text filter (NULL:
-- any; see newest.sql).
--
-- Returns message_id (int8) per replayed row.
--
-- target locks the rows first and keeps their old values for the record:
-- UPDATE ... RETURNING only sees the new ones.
WITH target AS (
       SELECT id, attempts, dead_at, dead_reason, last_error
         FROM {schema}.messages
        WHERE status = 'dead'
          AND ($1::int8[] IS NULL OR id = ANY($1))
          AND ($2::text IS NULL OR topic = $2)
          AND ($4::text IS NULL OR strpos(lower(coalesce(dead_reason, '') || ' ' ||
                 coalesce(last_error, '') || ' ' || event_type || ' ' || aggregate_id || ' ' ||
                 payload::text), lower($4)) > 0)
          AND {schema}.headers_valid(headers)
          AND {schema}.message_state_problem('pending', NULL, NULL, NULL, 0, now(), created_at) IS NULL
        FOR UPDATE),
     replayed AS (
       UPDATE {schema}.messages m
          SET status = 'pending', attempts = 0, next_run_at = now(),
              dead_at = NULL, dead_reason = NULL, last_error = NULL,
              locked_by = NULL, locked_at = NULL
         FROM target t WHERE m.id = t.id
       RETURNING m.id)
INSERT INTO {schema}.dead_replays
  (message_id, replayed_by, attempts, dead_at, dead_reason, last_error)
SELECT t.id, coalesce($3::text, session_user::text), t.attempts, t.dead_at,
       t.dead_reason, t.last_error
  FROM target t JOIN replayed USING (id)
RETURNING message_id
