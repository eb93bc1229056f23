-- The insert-only engine (docs/design/insert-only.md, "Design (settled)").
--
-- DRAFT, not in MIGRATIONS yet: phase 2 registers it together with the
-- relay that reads it. Until then the test `insert_only_draft` applies it
-- to a schema of its own, after migrations 1 to 11.
--
-- Producers keep `INSERT INTO {schema}.messages` with the producer's
-- columns. The table they write to becomes insert-only: written once,
-- then only read, in windows between two snapshots; the state columns
-- leave it. Today's table, with every row in the state it has, becomes
-- `retries`: the rare path, where today's claim, backoff, dead letters and
-- replay keep working. Re-runnable: each step is guarded, so a second run
-- finds nothing to do.

-- 1. Today's table becomes `retries`, with its indexes, constraints and
--    trigger renamed so that the new `messages` can take the names. Rows
--    arrive there from `messages` with their ids: no default.
DO $retries$
BEGIN
    IF to_regclass('{schema}.retries') IS NOT NULL THEN
        RETURN;
    END IF;
    ALTER TABLE {schema}.messages RENAME TO retries;
    ALTER TABLE {schema}.retries RENAME CONSTRAINT messages_pkey TO retries_pkey;
    ALTER TABLE {schema}.retries RENAME CONSTRAINT messages_event_id_key TO retries_event_id_key;
    ALTER TABLE {schema}.retries RENAME CONSTRAINT messages_state_valid TO retries_state_valid;
    ALTER TABLE {schema}.retries RENAME CONSTRAINT messages_headers_valid TO retries_headers_valid;
    ALTER INDEX {schema}.messages_claimable_idx RENAME TO retries_claimable_idx;
    ALTER INDEX {schema}.messages_dead_idx RENAME TO retries_dead_idx;
    ALTER TRIGGER messages_notify_relay ON {schema}.retries RENAME TO retries_notify_relay;
    ALTER TABLE {schema}.retries ALTER COLUMN id DROP DEFAULT;
    ALTER TABLE {schema}.retries SET (fillfactor = 50);
END
$retries$;

-- The hold: an aggregate with a row here that is not dead is held, and
-- the hot path sends its later messages here behind it. One probe per
-- row the hot path reads (measured: drain2.sh).
CREATE INDEX IF NOT EXISTS retries_live_aggregate_idx
    ON {schema}.retries (aggregate_type, aggregate_id) WHERE dead_at IS NULL;

-- 2. The new `messages`: the producer's columns and the id of the
--    transaction that wrote the row, which places the row in the window
--    of the snapshots it committed between. Partitioned by id range: space
--    comes back by dropping a partition once every lane has passed it.
--    `event_id` is unique within a partition (a unique index across
--    partitions must contain the partition key).
CREATE TABLE IF NOT EXISTS {schema}.messages (
    id             BIGINT NOT NULL DEFAULT {schema}.next_message_id(),
    xid            XID8 NOT NULL DEFAULT pg_current_xact_id(),
    event_id       UUID NOT NULL DEFAULT gen_random_uuid(),
    event_type     TEXT NOT NULL,
    event_version  INT NOT NULL DEFAULT 1,
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    payload        JSONB NOT NULL,
    headers        JSONB NOT NULL DEFAULT '{}',
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT messages_pkey PRIMARY KEY (id),
    -- migration 6's rule and migration 10's, refused at the door: nothing
    -- in this table can be changed afterwards
    CONSTRAINT messages_headers_valid CHECK ({schema}.headers_valid(headers)),
    CONSTRAINT messages_created_at_valid CHECK (
        isfinite(created_at) AND created_at < '262142-01-01 00:00:00+00')
) PARTITION BY RANGE (id);
ALTER SEQUENCE {schema}.messages_id_seq OWNED BY {schema}.messages.id;
-- A tick finds where its window's id walk starts through this index.
CREATE INDEX IF NOT EXISTS messages_xid_idx ON {schema}.messages (xid);

-- The first partition starts at the sequence's next id and spans 2^32 ids
-- (a rotation moves the sequence to the next partition's start); ids no
-- partition covers (given by hand) go to the default one, and none below
-- the first partition.
DO $partitions$
DECLARE
    start int8 := (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
                     FROM {schema}.messages_id_seq);
    name text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = '{schema}.messages'::regclass) THEN
        RETURN;
    END IF;
    name := 'messages_' || start;
    EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {schema}.messages FOR VALUES FROM (%s) TO (%s)',
                   name, start, start + 4294967296);
    EXECUTE format('CREATE UNIQUE INDEX %I ON {schema}.%I (event_id)', 'messages_event_id_key_' || start, name);
    CREATE TABLE {schema}.messages_default PARTITION OF {schema}.messages DEFAULT;
    CREATE UNIQUE INDEX messages_event_id_key_default ON {schema}.messages_default (event_id);
    -- Ids below the first partition are those of the rows kept in
    -- `retries` and `messages_sent`: a row given one of them by hand would
    -- take the id of another message, and its lane could never copy it
    -- into `retries` (the key is taken). Refused at the door.
    EXECUTE format('ALTER TABLE {schema}.messages_default ADD CONSTRAINT messages_id_not_kept CHECK (id >= %s)', start);
END
$partitions$;

DROP TRIGGER IF EXISTS messages_notify_relay ON {schema}.messages;
CREATE TRIGGER messages_notify_relay
    AFTER INSERT ON {schema}.messages
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_relay();

-- 3. The lanes' positions, as a log: a settled batch inserts its lane's
--    next position (`seq` + 1), so two relays can never both settle from
--    one position (the second gets a unique violation, and its settle,
--    with what it sent to `retries`, rolls back), and a held transaction
--    finds no chain of dead versions to walk. A lane's rows are those
--    committed after `lo` and visible in `hi` (its window), and every such
--    row with an id at or below `last_id` has been published or sent to
--    `retries`, at `sent_at` of the first position that passed it.
CREATE TABLE IF NOT EXISTS {schema}.lane_positions (
    lane     INT NOT NULL CHECK (lane BETWEEN 0 AND 3),
    seq      BIGINT NOT NULL,
    lo       PG_SNAPSHOT NOT NULL,
    hi       PG_SNAPSHOT NOT NULL,
    last_id  BIGINT NOT NULL,
    relay_id TEXT,
    sent_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (lane, seq)
);
-- Every lane starts at an empty window taken now: nothing of the new
-- table is visible in it, so the first tick's window holds every row.
INSERT INTO {schema}.lane_positions (lane, seq, lo, hi, last_id)
SELECT l, 0, pg_current_snapshot(), pg_current_snapshot(), -9223372036854775808
  FROM generate_series(0, 3) AS l
ON CONFLICT (lane, seq) DO NOTHING;

-- A message's lane: its aggregate's bucket (migration 7's low 10 bits)
-- modulo the four lanes. The owner of lane `l` owns the buckets `b` with
-- `b % 4 = l`.
CREATE OR REPLACE FUNCTION {schema}.message_lane(aggregate_type text, aggregate_id text)
    RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $lane$
    SELECT ((hashtextextended(aggregate_type || chr(31) || aggregate_id, 0) & 1023) % 4)::int
$lane$;
-- A lane's walk goes up this index: its own rows only, in id order (up
-- the primary key it read every lane's rows and kept a quarter).
CREATE INDEX IF NOT EXISTS messages_lane_idx
    ON {schema}.messages ({schema}.message_lane(aggregate_type, aggregate_id), id);

-- Buckets are handed out a lane at a time: the owner of lane `l` owns
-- every bucket `b` with `b % 4 = l`, in `messages` and in `retries`, so
-- the relay that holds an aggregate back in `retries` is the one that
-- claims it there. Migration 7's heartbeat, with the fair share counted
-- in lanes (4 / live relays, rounded up; a relay beyond four is a
-- standby), and with every relay taking lanes whatever its ordering: the
-- hot path needs an owner either way. A lane changes hands through its
-- first bucket (`b = l`), locked SKIP LOCKED, so two relays never move the
-- same lane's buckets at once. Buckets owned bucket by bucket before this
-- migration are freed: the relays of the previous build refuse the schema.
DO $free$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.lane_positions WHERE seq > 0) THEN
        UPDATE {schema}.relay_buckets SET owner = NULL WHERE owner IS NOT NULL;
    END IF;
END
$free$;

CREATE OR REPLACE FUNCTION {schema}.relay_heartbeat(
    me text, me_token int8, me_ordering text, lease_secs float8)
    RETURNS TABLE (bucket int, gained boolean, renewed boolean, other_modes int8)
    LANGUAGE plpgsql AS $beat$
#variable_conflict use_column
DECLARE
    was_renewed boolean;
    live int;
    share int;
    mine int;
    taken int[] := '{}';
BEGIN
    UPDATE {schema}.relays r
       SET lease_until = now() + lease_secs * interval '1 second', ordering = me_ordering
     WHERE r.relay_id = me AND r.token = me_token;
    was_renewed := FOUND;
    IF NOT was_renewed THEN
        DELETE FROM {schema}.relays r WHERE r.relay_id = me AND r.lease_until < now();
        INSERT INTO {schema}.relays (relay_id, token, ordering, lease_until)
        VALUES (me, me_token, me_ordering, now() + lease_secs * interval '1 second')
        ON CONFLICT (relay_id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'relay id % is in use by another running relay; give each relay its own id', me
                USING ERRCODE = 'unique_violation';
        END IF;
        UPDATE {schema}.relay_buckets b SET owner = NULL WHERE b.owner = me;
    END IF;
    -- Waits for a claim or settle still running under an expired lease
    -- (it holds the row FOR SHARE), so none outlives the hand-over.
    DELETE FROM {schema}.relays r WHERE r.lease_until < now();
    UPDATE {schema}.relay_buckets b SET owner = NULL
     WHERE b.owner IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {schema}.relays r WHERE r.relay_id = b.owner);
    SELECT count(*) INTO live FROM {schema}.relays r;
    share := ceil(4.0 / greatest(live, 1));
    SELECT count(*) INTO mine FROM {schema}.relay_buckets b WHERE b.bucket < 4 AND b.owner = me;
    IF mine > share THEN
        UPDATE {schema}.relay_buckets b SET owner = NULL
         WHERE b.bucket % 4 IN (SELECT x.bucket FROM {schema}.relay_buckets x
                                 WHERE x.bucket < 4 AND x.owner = me
                                 ORDER BY x.bucket DESC LIMIT mine - share);
    ELSIF mine < share THEN
        WITH lanes AS (
            SELECT x.bucket AS lane FROM {schema}.relay_buckets x
             WHERE x.bucket < 4 AND x.owner IS NULL
             ORDER BY x.bucket LIMIT share - mine FOR UPDATE SKIP LOCKED),
        t AS (
            UPDATE {schema}.relay_buckets b SET owner = me
             WHERE b.bucket % 4 IN (SELECT lane FROM lanes)
            RETURNING b.bucket)
        SELECT coalesce(array_agg(t.bucket), '{}') INTO taken FROM t;
    END IF;
    RETURN QUERY
        SELECT b.bucket, b.bucket = ANY(taken), was_renewed,
               (SELECT count(*) FROM {schema}.relays r WHERE r.ordering <> me_ordering)
          FROM {schema}.relay_buckets b WHERE b.owner = me
        UNION ALL
        SELECT NULL, false, was_renewed,
               (SELECT count(*) FROM {schema}.relays r WHERE r.ordering <> me_ordering);
END
$beat$;

-- 4. all_messages: what the hot path holds (pending until its lane passes
--    it, then sent at the settle that did), what is in `retries` (its own
--    state), and what was sent before (messages_sent). A row both in
--    `messages` and `retries` or `messages_sent` is shown once, from there.
CREATE OR REPLACE VIEW {schema}.all_messages WITH (security_invoker = true) AS
    SELECT m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id,
           m.topic, m.payload, m.headers,
           CASE WHEN p.sent_at IS NULL THEN 'pending' ELSE 'sent' END AS status,
           CASE WHEN p.sent_at IS NULL THEN 0 ELSE 1 END AS attempts,
           m.created_at AS next_run_at, NULL::text AS locked_by, NULL::timestamptz AS locked_at,
           NULL::text AS last_error, NULL::timestamptz AS dead_at, NULL::text AS dead_reason,
           m.created_at, p.sent_at
      FROM {schema}.messages m
      LEFT JOIN LATERAL (
           SELECT lp.sent_at FROM {schema}.lane_positions lp
            WHERE lp.lane = {schema}.message_lane(m.aggregate_type, m.aggregate_id)
              AND lp.last_id >= m.id
              AND pg_visible_in_snapshot(m.xid, lp.hi)
              AND NOT pg_visible_in_snapshot(m.xid, lp.lo)
            ORDER BY lp.seq LIMIT 1) p ON true
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.retries r WHERE r.id = m.id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.messages_sent s WHERE s.id = m.id)
    UNION ALL
    SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
           payload, headers, status, attempts, next_run_at, locked_by, locked_at,
           last_error, dead_at, dead_reason, created_at, sent_at
      FROM {schema}.retries
    UNION ALL
    SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
           payload, headers, status, attempts, next_run_at, locked_by, locked_at,
           last_error, dead_at, dead_reason, created_at, sent_at
      FROM {schema}.messages_sent;

-- 5. A lane's batch (the relay's lane/batch.sql calls it): the next rows
--    of lane $1 in its window (committed after snapshot $2, visible in
--    $3), above id $4, in id order, at most $5 rows and $6 bytes (at least
--    one row); a row over $7 bytes comes without its content. Then the
--    row's aggregate key, and held: its aggregate has a row in retries
--    that is not dead. No lock and no write. A function for its settings:
--    the walk must go up messages_lane_idx in id order whatever the
--    planner estimates, and it estimates the lane and visibility filters
--    at a few rows of the whole partition (a fresh one has no statistics),
--    so it scans the partition and sorts it (measured, 200,000 rows: 67 ms
--    for a batch of 500, against about 3 ms up the index). An SQL
--    function: as plpgsql (a cached generic plan) the drain was slower
--    (0.67 of the DELETE limit against 0.91, `outbox bench ordering
--    --cases lanes,delete_limit`, 2026-12-08).
CREATE OR REPLACE FUNCTION {schema}.lane_batch(
    _lane int, _lo pg_snapshot, _hi pg_snapshot, _after_id int8, _max_rows int8,
    _max_batch_bytes int8, _max_message_bytes int8)
    RETURNS TABLE (id int8, event_id uuid, event_type text, event_version int,
                   aggregate_type text, aggregate_id text, topic text, payload jsonb,
                   headers jsonb, attempts int4, created_at timestamptz, message_bytes int8,
                   payload_bytes int8, aggregate_key int8, held boolean)
    LANGUAGE sql STABLE
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    AS $batch$
WITH c AS (
       SELECT m.*,
              (octet_length(m.payload::text) + octet_length(m.headers::text)
               + octet_length(m.topic) + octet_length(m.event_type)
               + octet_length(m.aggregate_type) + octet_length(m.aggregate_id))::int8 AS size
         FROM {schema}.messages m
        WHERE {schema}.message_lane(m.aggregate_type, m.aggregate_id) = $1
          AND m.id > $4
          AND pg_visible_in_snapshot(m.xid, $3)
          AND NOT pg_visible_in_snapshot(m.xid, $2)
        ORDER BY {schema}.message_lane(m.aggregate_type, m.aggregate_id), m.id LIMIT $5),
     w AS (
       SELECT c.*, row_number() OVER (ORDER BY c.id) AS n,
              sum(CASE WHEN c.size <= $7::int8 THEN c.size ELSE 0 END)
                OVER (ORDER BY c.id) AS running
         FROM c)
SELECT w.id, w.event_id,
       CASE WHEN w.size <= $7 THEN w.event_type END, w.event_version,
       CASE WHEN w.size <= $7 THEN w.aggregate_type END,
       CASE WHEN w.size <= $7 THEN w.aggregate_id END,
       CASE WHEN w.size <= $7 THEN w.topic END,
       CASE WHEN w.size <= $7 THEN w.payload END,
       CASE WHEN w.size <= $7 THEN w.headers END,
       0::int4, w.created_at, w.size,
       CASE WHEN w.size > $7 THEN octet_length(w.payload::text)::int8 END,
       {schema}.aggregate_key(w.aggregate_type, w.aggregate_id),
       EXISTS (SELECT 1 FROM {schema}.retries r
                WHERE r.aggregate_type = w.aggregate_type AND r.aggregate_id = w.aggregate_id
                  AND r.dead_at IS NULL)
  FROM w WHERE w.n = 1 OR w.running <= $6::int8
 ORDER BY w.id
$batch$;
