-- LISTEN on the channel the insert trigger notifies (migration 3):
-- {channel} is the schema's channel, outbox_<schema> cut to 63 bytes.
LISTEN "{channel}"
