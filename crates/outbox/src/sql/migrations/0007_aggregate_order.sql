-- Per-aggregate order: relays lease the aggregates, not the rows.
--
-- Every aggregate (aggregate_type, aggregate_id) hashes to one of 1,024
-- buckets, and each bucket is leased to one relay at a time. Inside its
-- buckets a relay is the only one that claims, so it knows every aggregate
-- that has a message in flight, failing or waiting, and keeps message k+1
-- back until message k is sent or dead with a filter in memory, not an
-- index probe per row: nothing is added to messages, and producers pay
-- nothing. Re-runnable: every object is created if missing or replaced.

-- The aggregate's key; its low 10 bits are its bucket. hashtextextended is
-- the function hash partitioning uses: stable inside a cluster, which is
-- all a key must be (buckets are internal and re-derived at every start).
CREATE OR REPLACE FUNCTION {schema}.aggregate_key(aggregate_type text, aggregate_id text)
    RETURNS int8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $key$
    SELECT hashtextextended(aggregate_type || chr(31) || aggregate_id, 0)
$key$;

-- Relays running with ordering on, with the lease that keeps them alive.
-- A claim holds its relay's row FOR SHARE while it runs, so a relay that
-- takes over the buckets of one whose lease ran out (deleting its row
-- first) waits for that relay's last claim to end: two relays never claim
-- in one bucket at once, whatever their clocks or pauses.
CREATE TABLE IF NOT EXISTS {schema}.relays (
    relay_id    TEXT PRIMARY KEY,
    -- Random per process: a relay restarted under the same id is another
    -- incarnation, and starts from nothing.
    token       BIGINT NOT NULL,
    ordering    TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {schema}.relay_buckets (
    bucket INT PRIMARY KEY CHECK (bucket BETWEEN 0 AND 1023),
    owner  TEXT
);
INSERT INTO {schema}.relay_buckets (bucket)
    SELECT generate_series(0, 1023) ON CONFLICT (bucket) DO NOTHING;

-- The claim's filter with ordering on: the row's bucket is one this relay
-- owns (`owned` is a 1,024-bit map, NULL for all), and its aggregate is not
-- held back (`keys[i]` lets through only ids up to `heads[i]`: the
-- aggregate's next message, failed and waiting or released). plpgsql on
-- purpose: the planner cannot see through it, so it keeps the claim's plan
-- (the claimable index in id order, LIMIT) instead of misjudging the
-- filter as very selective and sorting the whole table.
CREATE OR REPLACE FUNCTION {schema}.key_allowed(
    aggregate_type text, aggregate_id text, id int8, owned bytea, keys int8[], heads int8[])
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $allowed$
DECLARE
    k int8 := hashtextextended(aggregate_type || chr(31) || aggregate_id, 0);
    i int;
BEGIN
    IF owned IS NOT NULL AND get_bit(owned, (k & 1023)::int) = 0 THEN
        RETURN false;
    END IF;
    i := array_position(keys, k);
    RETURN i IS NULL OR id <= heads[i];
END
$allowed$;

-- One heartbeat of relay `me`: renew (or register) its lease, forget the
-- relays whose lease ran out and free their buckets, then take or give
-- back buckets towards a fair share (1,024 / live ordered relays, rounded
-- up). Returns the buckets it owns afterwards, `gained` for those taken in
-- this call, and `renewed`: false when the relay was not registered under
-- its token (first beat, or its lease ran out and another relay removed
-- it), so that it starts again from nothing. A relay with ordering off
-- only registers (so mixed modes can be warned about) and owns nothing.
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
        -- An expired row under this id (a relay that died) is replaced; a
        -- live one belongs to another process given the same id.
        DELETE FROM {schema}.relays r WHERE r.relay_id = me AND r.lease_until < now();
        INSERT INTO {schema}.relays (relay_id, token, ordering, lease_until)
        VALUES (me, me_token, me_ordering, now() + lease_secs * interval '1 second')
        ON CONFLICT (relay_id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'relay id % is in use by another running relay; give each relay its own id', me
                USING ERRCODE = 'unique_violation';
        END IF;
        -- Whatever this id owned belonged to an earlier incarnation.
        UPDATE {schema}.relay_buckets b SET owner = NULL WHERE b.owner = me;
    END IF;
    -- Waits for a claim still running under an expired lease (it holds the
    -- row FOR SHARE), so none can outlive the hand-over of its buckets.
    DELETE FROM {schema}.relays r WHERE r.lease_until < now();
    UPDATE {schema}.relay_buckets b SET owner = NULL
     WHERE b.owner IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {schema}.relays r WHERE r.relay_id = b.owner);
    IF me_ordering = 'aggregate' THEN
        SELECT count(*) INTO live FROM {schema}.relays r WHERE r.ordering = 'aggregate';
        share := ceil(1024.0 / greatest(live, 1));
        SELECT count(*) INTO mine FROM {schema}.relay_buckets b WHERE b.owner = me;
        IF mine > share THEN
            UPDATE {schema}.relay_buckets b SET owner = NULL
             WHERE b.bucket IN (SELECT x.bucket FROM {schema}.relay_buckets x WHERE x.owner = me
                                 ORDER BY x.bucket DESC LIMIT mine - share);
        ELSIF mine < share THEN
            WITH t AS (
                UPDATE {schema}.relay_buckets b SET owner = me
                 WHERE b.bucket IN (SELECT x.bucket FROM {schema}.relay_buckets x
                                     WHERE x.owner IS NULL ORDER BY x.bucket
                                     LIMIT share - mine FOR UPDATE SKIP LOCKED)
                RETURNING b.bucket)
            SELECT coalesce(array_agg(t.bucket), '{}') INTO taken FROM t;
        END IF;
    ELSE
        UPDATE {schema}.relay_buckets b SET owner = NULL WHERE b.owner = me;
    END IF;
    RETURN QUERY
        SELECT b.bucket, b.bucket = ANY(taken), was_renewed,
               (SELECT count(*) FROM {schema}.relays r WHERE r.ordering <> me_ordering)
          FROM {schema}.relay_buckets b WHERE b.owner = me
        UNION ALL
        -- One row even when nothing is owned, to carry the flags.
        SELECT NULL, false, was_renewed,
               (SELECT count(*) FROM {schema}.relays r WHERE r.ordering <> me_ordering);
END
$beat$;
