-- The relays registered for ordering per aggregate.
--
-- Returns relay_id (text), ordering (text), lease_until (timestamptz),
-- started_at (timestamptz).
SELECT relay_id, ordering, lease_until, started_at
  FROM {schema}.relays ORDER BY relay_id
