-- Deletes one batch of dead rows that died before the cutoff.
--
-- Parameters: $1 timestamptz cutoff (cutoff.sql), $2 int8 batch size.
--
-- Returns the rows deleted, as rows affected.
--
-- SKIP LOCKED: two archivers (the relay's and an operator's) split the
-- work instead of queueing behind each other. The outer WHERE repeats the
-- condition so that a row changed meanwhile (a dead row replayed) is re-checked
-- on its new version and left alone.
DELETE FROM {schema}.messages
 WHERE id IN (SELECT id FROM {schema}.messages
               WHERE status = 'dead' AND dead_at < $1
               LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND status = 'dead' AND dead_at < $1
