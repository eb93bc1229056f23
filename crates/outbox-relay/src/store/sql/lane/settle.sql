-- DRAFT (docs/design/insert-only.md, phase 2): settle a lane's batch in
-- one statement. The lane's next position is inserted at $2 + 1: a relay
-- that lost the lane, settling from a position another has already moved
-- from, gets a unique violation, and its settle rolls back whole. The rows
-- the destination refused, and those of held aggregates, are copied into
-- `retries` with the state today's settle writes; the others are sent by
-- this settle (implicitly: the position has passed them). Nothing is
-- written unless relay $6 is registered under token $7 with a live lease
-- (its row held FOR SHARE until commit, as the claim does) and owns the
-- lane's buckets.
--
-- Parameters: $1 int4 the lane, $2 int8 the position read at, $3 text lo,
-- $4 text hi (pg_snapshot, the window read), $5 int8 the highest id the
-- walk passed, $6 text the relay's id, $7 int8 its token, $8 int8[] failed
-- ids, $9 text[] their errors, $10 timestamptz[] their next_run_at, $11
-- int8[] dead ids, $12 text[] their reasons, $13 int8[] held ids.
--
-- Returns settled (int8: 1, or 0 without the lease), failed, dead, held
-- (int8): the rows copied into retries in each state.
WITH ok AS MATERIALIZED (
       SELECT 1 FROM {schema}.relays r
        WHERE r.relay_id = $6 AND r.token = $7 AND r.lease_until > now()
          AND EXISTS (SELECT 1 FROM {schema}.relay_buckets b WHERE b.bucket = $1 AND b.owner = $6)
          FOR SHARE OF r),
     pos AS (
       INSERT INTO {schema}.lane_positions (lane, seq, lo, hi, last_id, relay_id)
       SELECT $1::int4, $2::int8 + 1, $3::text::pg_snapshot, $4::text::pg_snapshot, $5::int8, $6 FROM ok
       RETURNING 1),
     moved AS (
       INSERT INTO {schema}.retries
         (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
          payload, headers, status, attempts, next_run_at, last_error, dead_at, dead_reason,
          created_at)
       SELECT m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id,
              m.topic, m.payload, m.headers, s.status,
              CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
              coalesce(s.next_run_at, now()), s.error,
              CASE WHEN s.status = 'dead' THEN now() END,
              CASE WHEN s.status = 'dead' THEN s.error END,
              m.created_at
         FROM (SELECT id, 'failed' AS status, error, next_run_at
                 FROM unnest($8::int8[], $9::text[], $10::timestamptz[]) AS f(id, error, next_run_at)
               UNION ALL
               SELECT id, 'dead', reason, NULL FROM unnest($11::int8[], $12::text[]) AS d(id, reason)
               UNION ALL
               SELECT id, 'pending', NULL, NULL FROM unnest($13::int8[]) AS h(id)) s
         JOIN {schema}.messages m ON m.id = s.id
        WHERE EXISTS (SELECT 1 FROM ok)
       RETURNING status)
SELECT (SELECT count(*) FROM pos) AS settled,
       (SELECT count(*) FROM moved WHERE status = 'failed') AS failed,
       (SELECT count(*) FROM moved WHERE status = 'dead') AS dead,
       (SELECT count(*) FROM moved WHERE status = 'pending') AS held
