\set a random(0, 9999)
INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) VALUES ('bench.event', 'order', md5(:a::int::text)::uuid::text, 'bench', jsonb_build_object('i', :a::int, 'pad', repeat('x', 100)));
