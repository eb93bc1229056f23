\set a random(0, 9999)
INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) SELECT 'bench.event', 'order', md5(((:a + g * 37) % 10000)::text)::uuid::text, 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100)) FROM generate_series(1, 100) g;
