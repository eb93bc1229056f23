TRUNCATE outbox.messages, outbox.messages_sent;
INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload)
SELECT 'race', 'r', ((g / 5) % 200)::text, 'race', jsonb_build_object('i', g) FROM generate_series(1, 20000) g;
VACUUM ANALYZE outbox.messages;
