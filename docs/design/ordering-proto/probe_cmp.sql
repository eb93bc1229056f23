\timing on
-- 5000 candidates, each probed; heads of spread case (first 5000 ids -> all heads)
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 0 AND dead_at IS NULL ORDER BY id LIMIT 5000) w
 WHERE (SELECT max(p.id) FROM outbox.messages p WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id AND p.id < w.id AND p.dead_at IS NULL) IS NULL;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 0 AND dead_at IS NULL ORDER BY id LIMIT 5000) w
 WHERE NOT EXISTS (SELECT 1 FROM outbox.messages p WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id AND p.id < w.id AND p.dead_at IS NULL OFFSET 0);
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 0 AND dead_at IS NULL ORDER BY id LIMIT 5000) w;
-- blocked candidates: ids 10001..15000 (second message of each aggregate)
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 10001 AND dead_at IS NULL ORDER BY id LIMIT 5000) w
 WHERE (SELECT max(p.id) FROM outbox.messages p WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id AND p.id < w.id AND p.dead_at IS NULL) IS NULL;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 10001 AND dead_at IS NULL ORDER BY id LIMIT 5000) w
 WHERE NOT EXISTS (SELECT 1 FROM outbox.messages p WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id AND p.id < w.id AND p.dead_at IS NULL OFFSET 0);
