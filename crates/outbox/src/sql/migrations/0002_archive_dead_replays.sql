-- Archiving and dead-letter replay.
--
-- archived_messages receives sent rows (and, on request, dead rows) once
-- they are old enough to leave the live tables; all_messages does not show
-- them. It is append-only and read rarely (support looking up an old
-- message), so it carries only the primary key: it also guarantees that a
-- message is archived at most once.
CREATE TABLE {schema}.archived_messages (
    id             BIGINT PRIMARY KEY,
    event_id       UUID NOT NULL,
    event_type     TEXT NOT NULL,
    event_version  INT NOT NULL,
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    payload        JSONB NOT NULL,
    headers        JSONB NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('sent', 'dead')),
    attempts       INT NOT NULL,
    next_run_at    TIMESTAMPTZ NOT NULL,
    locked_by      TEXT,
    locked_at      TIMESTAMPTZ,
    last_error     TEXT,
    dead_at        TIMESTAMPTZ,
    dead_reason    TEXT,
    created_at     TIMESTAMPTZ NOT NULL,
    sent_at        TIMESTAMPTZ,
    archived_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One row per dead message sent back to pending: who did it, when, and what
-- the message had died of (the replay clears those fields on the message).
CREATE TABLE {schema}.dead_replays (
    id           BIGSERIAL PRIMARY KEY,
    message_id   BIGINT NOT NULL,
    replayed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    replayed_by  TEXT NOT NULL,
    attempts     INT NOT NULL,
    dead_at      TIMESTAMPTZ,
    dead_reason  TEXT,
    last_error   TEXT
);
-- "Was this message replayed before, and how often?"
CREATE INDEX dead_replays_message_id_idx ON {schema}.dead_replays (message_id);
