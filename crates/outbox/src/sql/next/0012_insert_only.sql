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
-- partition covers (given by hand) go to the default one.
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
