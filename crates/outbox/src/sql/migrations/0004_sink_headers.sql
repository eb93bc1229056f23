-- The PostgreSQL sink keeps each message's headers, as every broker
-- publisher does: a consumer reading published_events then sees the
-- producer's trace context (traceparent, tracestate) and whatever else the
-- producer put there. Rows published before this migration get '{}'.
ALTER TABLE {schema}.published_events
    ADD COLUMN IF NOT EXISTS headers JSONB NOT NULL DEFAULT '{}';
