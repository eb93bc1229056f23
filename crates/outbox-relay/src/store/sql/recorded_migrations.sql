-- The versions recorded in schema_migrations (run only when it exists).
--
-- Returns version (int4) per recorded migration, in order.
SELECT version FROM {schema}.schema_migrations ORDER BY version
