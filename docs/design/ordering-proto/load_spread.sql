TRUNCATE outbox.messages, outbox.messages_sent;
INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload)
SELECT 'bench.event', 'bench', (g % 10000)::text, 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100))
  FROM generate_series(1, 200000) g;
VACUUM ANALYZE outbox.messages; CHECKPOINT;
