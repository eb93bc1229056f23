-- Settle a batch in one round trip. The lease is (locked_by, locked_at):
-- rows whose lease is no longer the claim's are left alone. Sent rows move
-- to messages_sent in the same statement. Failed rows wait for their next
-- run; dead rows are dead-lettered. Released rows go back to pending with
-- the claim's attempt given back (the destination was down, or the relay
-- is shutting down).
--
-- Parameters: $1 int8[] sent ids, $2 text the relay's id, $3 timestamptz
-- the claim's locked_at, $4 int8[] failed ids, $5 text[] their errors,
-- $6 timestamptz[] their next_run_at, $7 int8[] dead ids, $8 text[] their
-- reasons, $9 int8[] released ids, $10 text the release reason.
--
-- Returns sent, failed, dead, released (int8): the rows actually settled.
WITH sent AS (
       DELETE FROM {schema}.messages
        WHERE id = ANY($1::int8[]) AND status = 'processing'
          AND locked_by = $2 AND locked_at = $3
       RETURNING *),
     moved AS (
       INSERT INTO {schema}.messages_sent
         (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
          payload, headers, attempts, next_run_at, locked_by, locked_at, last_error,
          created_at, sent_at)
       SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
              payload, headers, attempts, next_run_at, locked_by, locked_at, last_error,
              created_at, now()
         FROM sent
       RETURNING 1),
     failed AS (
       UPDATE {schema}.messages m
          SET status = 'failed', locked_by = NULL, locked_at = NULL,
              last_error = f.error, next_run_at = f.next_run_at
         FROM unnest($4::int8[], $5::text[], $6::timestamptz[]) AS f(id, error, next_run_at)
        WHERE m.id = f.id AND m.status = 'processing'
          AND m.locked_by = $2 AND m.locked_at = $3
       RETURNING 1),
     dead AS (
       UPDATE {schema}.messages m
          SET status = 'dead', locked_by = NULL, locked_at = NULL,
              last_error = d.reason, dead_reason = d.reason, dead_at = now()
         FROM unnest($7::int8[], $8::text[]) AS d(id, reason)
        WHERE m.id = d.id AND m.status = 'processing'
          AND m.locked_by = $2 AND m.locked_at = $3
       RETURNING 1),
     released AS (
       UPDATE {schema}.messages m
          SET status = 'pending', attempts = greatest(m.attempts - 1, 0),
              locked_by = NULL, locked_at = NULL, last_error = $10
        WHERE m.id = ANY($9::int8[]) AND m.status = 'processing'
          AND m.locked_by = $2 AND m.locked_at = $3
       RETURNING 1)
SELECT (SELECT count(*) FROM moved) AS sent,
       (SELECT count(*) FROM failed) AS failed,
       (SELECT count(*) FROM dead) AS dead,
       (SELECT count(*) FROM released) AS released
