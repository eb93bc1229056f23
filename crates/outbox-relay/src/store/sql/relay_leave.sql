-- A relay leaving: its registration goes, and its buckets are free at
-- once. Nothing happens unless it is registered under its token.
--
-- Parameters: $1 text the relay's id, $2 int8 its token.
WITH r AS (
       DELETE FROM {schema}.relays WHERE relay_id = $1 AND token = $2 RETURNING 1)
UPDATE {schema}.relay_buckets SET owner = NULL
 WHERE owner = $1 AND EXISTS (SELECT 1 FROM r)
