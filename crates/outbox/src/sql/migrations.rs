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

/// The migration in `migrations/<file>_<name>.sql`, whose version is the
/// number `file` spells: the file name states version and name once, and
/// [`Migration::label`] gives it back.
macro_rules! migration {
    ($file:literal, $name:ident) => {
        Migration {
            version: version($file),
            name: stringify!($name),
            sql: include_str!(concat!(
                "migrations/",
                $file,
                "_",
                stringify!($name),
                ".sql"
            )),
        }
    };
}

/// Every migration this build ships, in order.
pub const MIGRATIONS: &[Migration] = &[
    migration!("0001", init),
    migration!("0002", archive_dead_replays),
    migration!("0003", notify),
    migration!("0004", sink_headers),
    migration!("0005", hot_claims),
    migration!("0006", least_privilege_headers),
    migration!("0007", aggregate_order),
    migration!("0008", sink_envelope),
    migration!("0009", id_after_xid),
    migration!("0010", row_states),
    migration!("0011", drop_key_allowed),
];

/// The decimal number a migration's file name starts with; evaluated at
/// compile time, so a file name that is not one fails the build.
const fn version(file: &str) -> i32 {
    let digits = file.as_bytes();
    let mut version = 0;
    let mut i = 0;
    while i < digits.len() {
        assert!(
            digits[i].is_ascii_digit(),
            "a migration file name starts with its version"
        );
        version = version * 10 + (digits[i] - b'0') as i32;
        i += 1;
    }
    version
}

impl Migration {
    /// `0003_notify`: how `outbox migrate` names it (its file name).
    pub fn label(&self) -> String {
        format!("{:04}_{}", self.version, self.name)
    }
}

/// The newest migration this build ships: the version a schema must be at
/// for this build to use it.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Where a schema stands against this build's migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaVersion {
    /// Every migration of this build is recorded, and none newer.
    Current(i32),
    /// A migration of this build is not recorded. `at` is the last of the
    /// unbroken run recorded from the first (0 for none); `needs` is
    /// [`latest_version`].
    Behind {
        /// Last migration recorded without a gap before it.
        at: i32,
        /// What this build needs.
        needs: i32,
    },
    /// A migration newer than this build is recorded: the schema may hold
    /// columns or meanings this build would get wrong.
    Ahead {
        /// The newest recorded migration.
        at: i32,
        /// The newest this build knows.
        knows: i32,
    },
}

impl SchemaVersion {
    /// Compares the versions recorded in `schema_migrations` (any order)
    /// with [`MIGRATIONS`].
    pub fn of(recorded: &[i32]) -> Self {
        let latest = latest_version();
        let newest = recorded.iter().copied().max().unwrap_or(0);
        if newest > latest {
            return Self::Ahead {
                at: newest,
                knows: latest,
            };
        }
        let mut at = 0;
        for m in MIGRATIONS {
            if !recorded.contains(&m.version) {
                return Self::Behind { at, needs: latest };
            }
            at = m.version;
        }
        Self::Current(latest)
    }
}

/// The advisory lock every migration of `schema` takes first, held to the
/// end of its transaction: two migrations of one schema run one after the
/// other, and the second finds the first's records.
fn lock_key(schema: &Schema) -> String {
    format!("hashtext('outbox.migrate'), hashtext('{}')", schema.name())
}

/// A statement taking the migration lock of `schema` (see
/// [`migrate_script`]), waiting for it: a runner takes it in its
/// transaction before reading what is recorded, so that it reads what an
/// upgrade that held the lock committed, and reports only what it applied
/// itself. The script takes it again (the lock is re-entrant).
pub fn lock_statement(schema: &Schema) -> String {
    format!("SELECT pg_advisory_xact_lock({})", lock_key(schema))
}

/// As [`lock_statement`] without waiting: one `bool` column, `locked`,
/// false when another migration holds it (the runner then says it waited).
pub fn try_lock_statement(schema: &Schema) -> String {
    format!(
        "SELECT pg_try_advisory_xact_lock({}) AS locked",
        lock_key(schema)
    )
}

/// Whether `schema` has a `schema_migrations` table: one `bool` column,
/// `exists`. `to_regclass` is NULL for a missing table or schema, not an
/// error, so the runner's transaction goes on.
pub fn recorded_exists_statement(schema: &Schema) -> String {
    format!(
        "SELECT to_regclass('{}.schema_migrations') IS NOT NULL AS exists",
        schema.quoted()
    )
}

/// The versions recorded in `schema`, one `int4[]` column `versions`; run
/// (after [`lock_statement`], in the migration's transaction) only when
/// [`recorded_exists_statement`] says the table exists.
pub fn recorded_statement(schema: &Schema) -> String {
    format!(
        "SELECT coalesce(array_agg(version ORDER BY version), '{{}}') AS versions \
           FROM {}.schema_migrations",
        schema.quoted()
    )
}

/// The SQL script that creates or upgrades `schema` to the latest version.
/// Idempotent; refuses a schema migrated by a newer build.
pub fn migrate_script(schema: &Schema) -> String {
    let latest = latest_version();
    let mut script = format!(
        "{lock};\n\
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
        lock = lock_statement(schema),
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
    fn schema_version_compares_with_the_embedded_list() {
        let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        let latest = latest_version();
        assert_eq!(latest, *all.last().unwrap());
        assert_eq!(SchemaVersion::of(&all), SchemaVersion::Current(latest));
        let mut newest_missing = all.clone();
        newest_missing.pop();
        assert_eq!(
            SchemaVersion::of(&newest_missing),
            SchemaVersion::Behind {
                at: all[all.len() - 2],
                needs: latest
            }
        );
        let gap: Vec<i32> = all.iter().copied().filter(|v| *v != 2).collect();
        assert_eq!(
            SchemaVersion::of(&gap),
            SchemaVersion::Behind {
                at: 1,
                needs: latest
            }
        );
        assert_eq!(
            SchemaVersion::of(&[]),
            SchemaVersion::Behind {
                at: 0,
                needs: latest
            }
        );
        let mut newer = all.clone();
        newer.push(latest + 1);
        assert_eq!(
            SchemaVersion::of(&newer),
            SchemaVersion::Ahead {
                at: latest + 1,
                knows: latest
            }
        );
    }

    #[test]
    fn labels_are_the_file_names() {
        assert_eq!(MIGRATIONS[2].label(), "0003_notify");
    }

    #[test]
    fn script_quotes_the_schema_everywhere() {
        let s = migrate_script(&Schema::new("tenant_a").unwrap());
        assert!(!s.contains("{schema}"));
        assert!(s.contains("CREATE TABLE \"tenant_a\".messages"));
    }
}
