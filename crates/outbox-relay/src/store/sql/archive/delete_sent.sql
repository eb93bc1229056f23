-- Deletes one batch of sent rows older than the cutoff.
--
-- Parameters: $1 timestamptz cutoff (cutoff.sql), $2 int8 batch size.
--
-- Returns the rows deleted, as rows affected.
--
-- SKIP LOCKED: two archivers (the relay's and an operator's) split the
-- work instead of queueing behind each other. The outer WHERE repeats the
-- condition so that a row changed meanwhile is re-checked on its new version.
DELETE FROM {schema}.messages_sent
 WHERE id IN (SELECT id FROM {schema}.messages_sent WHERE sent_at < $1
               LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND sent_at < $1
