-- Whether the outbox tables exist, and whether the migrations table does.
--
-- Returns has_tables (bool), has_migrations (bool), has_lanes (bool: the
-- insert-only engine's hot path, migration 12's lane_positions).
SELECT to_regclass('{schema}.messages') IS NOT NULL AS has_tables,
       to_regclass('{schema}.schema_migrations') IS NOT NULL AS has_migrations,
       to_regclass('{schema}.lane_positions') IS NOT NULL AS has_lanes
