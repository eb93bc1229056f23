-- The lease reaper: takes back every processing row whose claim is older
-- than the lease (or has no lease, or one taken more than a lease in the
-- future: states migration 10 refuses, still taken back if written before
-- it).
--
-- The expiry counts as a failed attempt: a row that makes its relay die
-- would otherwise come back at once, forever. Below max attempts the row
-- goes failed, due after the backoff for its attempts; at max attempts it
-- goes dead. Both record which relay's lease expired and when it was taken.
--
-- Parameters: $1 float8 the lease in seconds, $2 int4 max attempts,
-- $3 float8[] the backoff steps in seconds (the last repeats), $4 float8
-- the jitter fraction.
--
-- Returns id (int8), dead (bool), next_run_at (timestamptz; the time of
-- death for a dead row), aggregate_key (int8) per row taken back.
--
-- SKIP LOCKED: a row locked right now is being settled by its holder,
-- whose lease then still counts; the next pass sees it.
WITH expired AS (
       SELECT id, attempts >= $2 AS dead,
              CASE WHEN locked_by IS NULL OR locked_at IS NULL
                   THEN format('processing without a lease after %s attempt%s',
                               attempts, CASE WHEN attempts = 1 THEN '' ELSE 's' END)
                   ELSE format('lease expired (relay %s claimed it at %s) after %s attempt%s',
                     locked_by,
                     to_char(locked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                     attempts, CASE WHEN attempts = 1 THEN '' ELSE 's' END) END AS reason,
              ($3::float8[])[least(greatest(attempts, 1), cardinality($3::float8[]))]
                * (1 + $4::float8 * (2 * random() - 1)) AS delay
         FROM {schema}.messages
        WHERE status = 'processing'
          AND (locked_at IS NULL OR locked_by IS NULL
               OR locked_at < now() - $1::float8 * interval '1 second'
               OR locked_at > now() + $1::float8 * interval '1 second')
        FOR UPDATE SKIP LOCKED)
UPDATE {schema}.messages m
   SET status = CASE WHEN e.dead THEN 'dead' ELSE 'failed' END,
       locked_by = NULL, locked_at = NULL,
       last_error = e.reason
         || CASE WHEN e.dead THEN '; max attempts reached' ELSE '' END,
       dead_reason = CASE WHEN e.dead
         THEN e.reason || '; max attempts reached' END,
       dead_at = CASE WHEN e.dead THEN now() END,
       next_run_at = CASE WHEN e.dead THEN m.next_run_at
         ELSE now() + make_interval(secs => e.delay) END
  FROM expired e WHERE m.id = e.id
RETURNING m.id, e.dead, CASE WHEN e.dead THEN now() ELSE m.next_run_at END AS next_run_at,
          {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key
