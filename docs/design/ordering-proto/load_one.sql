TRUNCATE outbox.messages, outbox.messages_sent;
INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload)
SELECT 'bench.event', 'bench', 'the-one', 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100))
  FROM generate_series(1, 40000) g;
VACUUM ANALYZE outbox.messages; CHECKPOINT;
