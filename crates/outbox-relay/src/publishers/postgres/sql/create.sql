-- Creates the sink table where it does not exist (a sink database apart
-- from the outbox), and adds the envelope columns (headers, event_type,
-- event_version, aggregate_type, aggregate_id, enqueued_at) to one made
-- before they existed, as migrations 4 and 8 do in the outbox schema. The
-- ALTER runs only when a column is missing: it requires owning the table,
-- which a least-privilege relay role does not. Several statements, run as
-- one batch.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.published_events (
  id BIGSERIAL PRIMARY KEY, message_id BIGINT NOT NULL, event_id UUID NOT NULL,
  topic TEXT NOT NULL, payload JSONB NOT NULL, publisher TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  headers JSONB NOT NULL DEFAULT '{}',
  event_type TEXT, event_version INT, aggregate_type TEXT, aggregate_id TEXT,
  enqueued_at TIMESTAMPTZ);
DO $sink$ BEGIN
  IF (SELECT count(*) FROM pg_attribute
       WHERE attrelid = '{schema}.published_events'::regclass
         AND attname IN ('headers', 'event_type', 'event_version',
                         'aggregate_type', 'aggregate_id', 'enqueued_at')
         AND NOT attisdropped) < 6 THEN
    ALTER TABLE {schema}.published_events
      ADD COLUMN IF NOT EXISTS headers JSONB NOT NULL DEFAULT '{}',
      ADD COLUMN IF NOT EXISTS event_type TEXT,
      ADD COLUMN IF NOT EXISTS event_version INT,
      ADD COLUMN IF NOT EXISTS aggregate_type TEXT,
      ADD COLUMN IF NOT EXISTS aggregate_id TEXT,
      ADD COLUMN IF NOT EXISTS enqueued_at TIMESTAMPTZ;
  END IF;
END $sink$
