-- How many times one message was written to the sink.
--
-- Parameters: $1 int8 message id.
--
-- Returns count (int8).
SELECT count(*) AS count FROM {schema}.published_events WHERE message_id = $1
