//! Embedded, numbered migrations and the script that applies them.
//!
//! The whole upgrade is one SQL script, so every driver (tokio-postgres,
//! sqlx, `psql -f` from `outbox migrate --print`) applies it the same way:
//! under an advisory lock, each migration inside a `DO` block that runs only
//! if its version is missing from `<schema>.schema_migrations`. The caller
//! runs it inside one transaction, so an upgrade is all or nothing.

use super::render;
use crate::Schema;

/// One numbered migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version number, strictly increasing.
    pub version: i32,
    /// Short name recorded in `schema_migrations`.
    pub name: &'static str,
    /// SQL with `{schema}` tokens.
    pub sql: &'static str,
}

/// Every migration this build ships, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "archive_dead_replays",
        sql: include_str!("migrations/0002_archive_dead_replays.sql"),
    },
    Migration {
        version: 3,
        name: "notify",
        sql: include_str!("migrations/0003_notify.sql"),
    },
    Migration {
        version: 4,
        name: "sink_headers",
        sql: include_str!("migrations/0004_sink_headers.sql"),
    },
    Migration {
        version: 5,
        name: "hot_claims",
        sql: include_str!("migrations/0005_hot_claims.sql"),
    },
    Migration {
        version: 6,
        name: "least_privilege_headers",
        sql: include_str!("migrations/0006_least_privilege_headers.sql"),
    },
];

/// The SQL script that creates or upgrades `schema` to the latest version.
/// Idempotent; refuses a schema migrated by a newer build.
pub fn migrate_script(schema: &Schema) -> String {
    let latest = MIGRATIONS.last().map_or(0, |m| m.version);
    let mut script = format!(
        "SELECT pg_advisory_xact_lock(hashtext('outbox.migrate'), hashtext('{name}'));\n\
         CREATE SCHEMA IF NOT EXISTS {{schema}};\n\
         CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (\n\
         \x20   version INT PRIMARY KEY,\n\
         \x20   name TEXT NOT NULL,\n\
         \x20   applied_at TIMESTAMPTZ NOT NULL DEFAULT now()\n\
         );\n\
         DO $outbox_check$ BEGIN\n\
         \x20 IF (SELECT coalesce(max(version), 0) FROM {{schema}}.schema_migrations) > {latest} THEN\n\
         \x20   RAISE EXCEPTION 'schema {name} was migrated by a newer outbox (this build knows up to version {latest}); upgrade outbox';\n\
         \x20 END IF;\n\
         END $outbox_check$;\n",
        name = schema.name(),
    );
    for m in MIGRATIONS {
        script.push_str(&format!(
            "DO $outbox_migration$ BEGIN\n\
             IF NOT EXISTS (SELECT 1 FROM {{schema}}.schema_migrations WHERE version = {v}) THEN\n\
             {sql}\n\
             INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ({v}, '{n}');\n\
             END IF;\n\
             END $outbox_migration$;\n",
            v = m.version,
            n = m.name,
            sql = m.sql,
        ));
    }
    render(&script, schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_strictly_increase() {
        for w in MIGRATIONS.windows(2) {
            assert!(w[0].version < w[1].version);
        }
    }

    #[test]
    fn script_quotes_the_schema_everywhere() {
        let s = migrate_script(&Schema::new("tenant_a").unwrap());
        assert!(!s.contains("{schema}"));
        assert!(s.contains("CREATE TABLE \"tenant_a\".messages"));
    }
}
