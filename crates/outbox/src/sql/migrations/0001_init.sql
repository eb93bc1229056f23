-- The outbox, the sent-row table behind it, the all_messages view, the
-- PostgreSQL sink and the consumer inbox.
--
-- Settled ('sent') rows leave the hot table: the relay moves them to
-- messages_sent in the same statement that marks them. The hot table then
-- holds only work still to do (plus dead rows, which the claim index skips),
-- so a claim never walks past history and vacuum has little to chase.
-- all_messages glues both back together for anyone asking about a message.

CREATE TABLE {schema}.messages (
    id             BIGSERIAL PRIMARY KEY,
    event_id       UUID NOT NULL DEFAULT gen_random_uuid(),
    event_type     TEXT NOT NULL,
    event_version  INT NOT NULL DEFAULT 1,
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    payload        JSONB NOT NULL,
    headers        JSONB NOT NULL DEFAULT '{}',
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead')),
    attempts       INT NOT NULL DEFAULT 0,
    next_run_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by      TEXT,
    locked_at      TIMESTAMPTZ,
    last_error     TEXT,
    dead_at        TIMESTAMPTZ,
    dead_reason    TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at        TIMESTAMPTZ,
    CONSTRAINT messages_event_id_key UNIQUE (event_id)
) WITH (fillfactor = 80);
-- fillfactor leaves room on each page so the claim's and the failure path's
-- UPDATEs can stay HOT (no new index entries) most of the time.

-- Only claimable rows are indexed, so the claim's ORDER BY id LIMIT n reads
-- exactly the rows it may take.
CREATE INDEX messages_claimable_idx ON {schema}.messages (id)
    WHERE status IN ('pending', 'failed');
-- The lease reaper looks only at claimed rows.
CREATE INDEX messages_processing_idx ON {schema}.messages (locked_at)
    WHERE status = 'processing';
CREATE INDEX messages_dead_idx ON {schema}.messages (dead_at)
    WHERE status = 'dead';

CREATE TABLE {schema}.messages_sent (
    id             BIGINT PRIMARY KEY,
    event_id       UUID NOT NULL,
    event_type     TEXT NOT NULL,
    event_version  INT NOT NULL,
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    payload        JSONB NOT NULL,
    headers        JSONB NOT NULL,
    status         TEXT NOT NULL DEFAULT 'sent' CHECK (status = 'sent'),
    attempts       INT NOT NULL,
    next_run_at    TIMESTAMPTZ NOT NULL,
    locked_by      TEXT,
    locked_at      TIMESTAMPTZ,
    last_error     TEXT,
    dead_at        TIMESTAMPTZ,
    dead_reason    TEXT,
    created_at     TIMESTAMPTZ NOT NULL,
    sent_at        TIMESTAMPTZ NOT NULL
);
-- Append-only in sent_at order: a BRIN index serves archiving at almost no
-- insert cost.
CREATE INDEX messages_sent_sent_at_brin ON {schema}.messages_sent USING brin (sent_at);

CREATE VIEW {schema}.all_messages AS
    SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
           payload, headers, status, attempts, next_run_at, locked_by, locked_at,
           last_error, dead_at, dead_reason, created_at, sent_at
      FROM {schema}.messages
    UNION ALL
    SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
           payload, headers, status, attempts, next_run_at, locked_by, locked_at,
           last_error, dead_at, dead_reason, created_at, sent_at
      FROM {schema}.messages_sent;

-- The PostgreSQL-table publisher's sink. No unique constraint: duplicates
-- must stay countable.
CREATE TABLE {schema}.published_events (
    id         BIGSERIAL PRIMARY KEY,
    message_id BIGINT NOT NULL,
    event_id   UUID NOT NULL,
    topic      TEXT NOT NULL,
    payload    JSONB NOT NULL,
    publisher  TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The consumer inbox: one row per event a consumer has processed.
CREATE TABLE {schema}.processed_events (
    event_id     TEXT PRIMARY KEY,
    topic        TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
