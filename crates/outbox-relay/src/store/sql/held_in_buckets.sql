-- The aggregates of some buckets that have a live message not claimable
-- now (in flight, or failed and waiting): what a relay taking the buckets
-- over must hold back. Scans the hot table: run at takeover only.
--
-- Parameters: $1 bytea the buckets (a 1,024-bit map).
--
-- Returns aggregate_key (int8), lowest_id (int8) per such aggregate.
SELECT {schema}.aggregate_key(aggregate_type, aggregate_id) AS aggregate_key,
       min(id) AS lowest_id
  FROM {schema}.messages
 WHERE dead_at IS NULL AND (status = 'processing' OR next_run_at > now())
   AND get_bit($1::bytea,
         ({schema}.aggregate_key(aggregate_type, aggregate_id) & 1023)::int) = 1
 GROUP BY 1
