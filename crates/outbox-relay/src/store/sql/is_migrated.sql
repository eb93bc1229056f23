-- Whether the outbox tables exist, and whether the migrations table does.
--
-- Returns has_tables (bool), has_migrations (bool).
SELECT to_regclass('{schema}.messages') IS NOT NULL AS has_tables,
       to_regclass('{schema}.schema_migrations') IS NOT NULL AS has_migrations
