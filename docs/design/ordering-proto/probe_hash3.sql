BEGIN; DROP INDEX outbox.messages_aggregate_idx;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages WHERE id >= 0 AND dead_at IS NULL ORDER BY id LIMIT 5000) w
 WHERE NOT EXISTS (SELECT 1 FROM outbox.messages p WHERE hashtextextended(p.aggregate_type || '/' || p.aggregate_id, 0) = hashtextextended(w.aggregate_type || '/' || w.aggregate_id, 0) AND p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id AND p.id < w.id AND p.dead_at IS NULL);
ROLLBACK;
