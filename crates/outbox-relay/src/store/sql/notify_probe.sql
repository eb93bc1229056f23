-- A notification on the schema's channel: the listener's check that LISTEN
-- works (producers' payloads are empty, this one is not).
--
-- Parameters: $1 text the payload.
SELECT pg_notify('{channel}', $1)
