-- A producer's transaction: one message into the table partitioned by id range.
INSERT INTO proto.pmessages (event_type, aggregate_type, aggregate_id, topic, payload)
VALUES ('bench.event', 'bench', (random() * 10000)::int::text, 'bench', '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}');
