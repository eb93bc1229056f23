-- Claim a batch (ordering per aggregate off).
--
-- Parameters: $1 int8 how many rows at most, $2 text the relay's id,
-- $3 int8 the lowest id to read, $4 int8 the batch's byte budget,
-- $5 int8 the max message size in bytes.
--
-- Returns, per claimed row: id, event_id, event_type, event_version,
-- aggregate_type, aggregate_id, topic, payload, headers, attempts,
-- created_at, locked_at, message_bytes (int8), payload_bytes (int8 or
-- NULL), then the claim snapshot's snapshot_xmin and snapshot_xmax (int8).
--
-- Claimable means pending, or failed and due. SKIP LOCKED lets many relays
-- claim disjoint batches without waiting on each other. The snapshot tells
-- the relay when no transaction that was running at the claim can still
-- commit a row below what it claimed.
--
-- The batch stops growing once its rows pass the byte budget (the first
-- row is always taken), and a row over the max message size is not loaded,
-- so what one claim loads into the relay is bounded whatever a producer
-- wrote. Such a row is claimed (to be dead-lettered) but its
-- producer-sized columns are NULL, message_bytes is its size and
-- payload_bytes how much of it is payload; it counts 0 toward the budget.
--
-- A row's size is what the relay receives: every column a producer sizes
-- (payload and headers as JSON text, the four text columns). Counting the
-- payload alone let twenty rows with 10 MiB headers take 832 MiB with a
-- 1 MiB batch budget. octet_length of a text column reads its stored
-- length without detoasting it; the JSON columns are rendered.
-- pg_column_size would be cheaper but is the stored size, which
-- compression can make a hundred times smaller.
--
-- attempts stops at the integer maximum rather than overflowing: one row at
-- 2147483647 failed every claim of every relay.
--
-- Window functions cannot share a SELECT with FOR UPDATE: rows are locked
-- in c, budgeted in w and b, and only the budgeted ones updated; the rest
-- are unlocked at commit, unchanged.
--
-- claim_ordered.sql and claim_ordered_filtered.sql are this statement with
-- more; a unit test checks that the parts they share are the same.
WITH c AS (
       SELECT id,
              (octet_length(payload::text) + octet_length(headers::text)
               + octet_length(topic) + octet_length(event_type)
               + octet_length(aggregate_type) + octet_length(aggregate_id))::int8 AS size
         FROM {schema}.messages
        WHERE id >= $3 AND status IN ('pending', 'failed') AND next_run_at <= now()
          AND dead_at IS NULL
        ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED),
     w AS (
       SELECT id, size, row_number() OVER (ORDER BY id) AS n,
              sum(CASE WHEN size <= $5::int8 THEN size ELSE 0 END)
                OVER (ORDER BY id) AS running
         FROM c),
     b AS (SELECT id, size FROM w WHERE n = 1 OR running <= $4::int8),
     s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap)
UPDATE {schema}.messages m
   SET status = 'processing', attempts = least(m.attempts, 2147483646) + 1,
       locked_by = $2, locked_at = now()
  FROM b, s WHERE m.id = b.id
RETURNING m.id, m.event_id,
          CASE WHEN b.size <= $5 THEN m.event_type END AS event_type, m.event_version,
          CASE WHEN b.size <= $5 THEN m.aggregate_type END AS aggregate_type,
          CASE WHEN b.size <= $5 THEN m.aggregate_id END AS aggregate_id,
          CASE WHEN b.size <= $5 THEN m.topic END AS topic,
          CASE WHEN b.size <= $5 THEN m.payload END AS payload,
          CASE WHEN b.size <= $5 THEN m.headers END AS headers,
          m.attempts, m.created_at, m.locked_at, b.size AS message_bytes,
          CASE WHEN b.size > $5 THEN octet_length(m.payload::text)::int8 END AS payload_bytes,
          pg_snapshot_xmin(s.snap)::text::int8 AS snapshot_xmin,
          pg_snapshot_xmax(s.snap)::text::int8 AS snapshot_xmax
