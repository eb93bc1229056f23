-- A producer's transaction: one message into the plain table.
INSERT INTO proto.messages (event_type, aggregate_type, aggregate_id, topic, payload)
VALUES ('bench.event', 'bench', (random() * 10000)::int::text, 'bench', '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}');
