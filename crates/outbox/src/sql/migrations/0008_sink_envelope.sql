-- The PostgreSQL sink carries the whole envelope, as every broker publisher
-- does: what happened and in which version (event_type, event_version),
-- about which entity (aggregate_type, aggregate_id), and when the producer's
-- transaction enqueued the message (enqueued_at, the message's created_at).
-- The sink's own created_at stays the time the row was published.
-- Rows published before this migration keep NULL in these columns (nothing
-- is rewritten, so the upgrade is instant on a large sink); every row the
-- relay writes from now on fills them.
ALTER TABLE {schema}.published_events
    ADD COLUMN IF NOT EXISTS event_type     TEXT,
    ADD COLUMN IF NOT EXISTS event_version  INT,
    ADD COLUMN IF NOT EXISTS aggregate_type TEXT,
    ADD COLUMN IF NOT EXISTS aggregate_id   TEXT,
    ADD COLUMN IF NOT EXISTS enqueued_at    TIMESTAMPTZ;
