//! Each database test gets its own schema on the real PostgreSQL
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`).
//! The schema (or database) is dropped when the test ends, pass or fail, so
//! no run leaves anything for the next (scripts/test.sh checks); with
//! `OUTBOX_TEST_KEEP=1` a failing test's is kept for inspection. A cleanup
//! that fails fails the test. What broker tests make has its guard in
//! [`litter`].

pub mod litter;
pub mod netns;
pub mod order_check;
pub mod ordering;
mod proxy;
pub mod readback;
pub mod sql_snapshot;
mod tansu;
pub mod webhook;

pub use proxy::FaultyProxy;
pub use tansu::Tansu;

use deadpool_postgres::{Pool, Runtime};
use outbox::Schema;

/// The database tests run against.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A pool on [`database_url`].
pub fn pool(max_size: usize) -> Pool {
    let mut cfg = deadpool_postgres::Config::new();
    cfg.url = Some(database_url());
    cfg.pool = Some(deadpool_postgres::PoolConfig::new(max_size));
    cfg.create_pool(Some(Runtime::Tokio1), tokio_postgres::NoTls)
        .expect("test pool")
}

/// A fresh, migrated schema for one test.
#[derive(Debug)]
pub struct TestSchema {
    /// The schema.
    pub schema: Schema,
    /// A pool on the test database (8 connections).
    pub pool: Pool,
}

impl TestSchema {
    /// Creates and migrates `t_<label>_<random>`.
    pub async fn new(label: &str) -> Self {
        let me = Self::unmigrated(label).await;
        let client = me.pool.get().await.expect("connect to the test database");
        outbox::migrate(&**client, &me.schema)
            .await
            .expect("migrate test schema");
        me
    }

    /// Names a fresh schema without creating it.
    pub async fn unmigrated(label: &str) -> Self {
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let name = format!("t_{label}_{:08x}", rand::random::<u32>());
        Self {
            schema: Schema::new(&name).expect("valid test schema name"),
            pool: pool(8),
        }
    }

    /// The bare schema name.
    pub fn name(&self) -> &str {
        self.schema.name()
    }

    /// Runs a query returning one `bigint`.
    pub async fn count(&self, sql: &str) -> i64 {
        let sql = sql.replace("{schema}", &self.schema.quoted());
        let client = self.pool.get().await.expect("connect");
        let row = client.query_one(sql.as_str(), &[]).await.expect(&sql);
        // Checked: a statement answering something else fails the test
        // naming it, rather than with the driver's bare panic.
        row.try_get(0)
            .unwrap_or_else(|e| panic!("{sql}: its first column is not a bigint: {e}"))
    }

    /// Makes the PostgreSQL sink (`published_events`) refuse rows of
    /// `topic` with SQLSTATE condition `errcode` and `message`, through a
    /// trigger named `reject_<topic>` (drop it to let them through).
    pub async fn sink_rejects(&self, topic: &str, errcode: &str, message: &str) {
        outbox::validate_identifier(topic).expect("a plain topic name");
        self.exec(&format!(
            "CREATE FUNCTION {{schema}}.reject_{topic}() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.topic = '{topic}' THEN \
               RAISE EXCEPTION '{message}' USING ERRCODE = '{errcode}'; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER reject_{topic} BEFORE INSERT ON {{schema}}.published_events \
               FOR EACH ROW EXECUTE FUNCTION {{schema}}.reject_{topic}();"
        ))
        .await;
    }

    /// Runs statements (with `{schema}` replaced).
    pub async fn exec(&self, sql: &str) {
        let sql = sql.replace("{schema}", &self.schema.quoted());
        let client = self.pool.get().await.expect("connect");
        client.batch_execute(&sql).await.expect(&sql);
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let what = format!("schema {}", self.schema);
        if keep(&what) {
            return;
        }
        // Dropped on a plain connection of our own: the pool's runtime may
        // be shutting down with the test.
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema.quoted());
        report(&what, admin_blocking(vec![sql]));
    }
}

/// The variable that keeps a failed test's schema or database for
/// inspection; by default everything a test made is removed, pass or fail.
pub const KEEP_VAR: &str = "OUTBOX_TEST_KEEP";

/// Whether to leave `what` in place: only for a failing test, and only with
/// [`KEEP_VAR`] set (saying so).
fn keep(what: &str) -> bool {
    let keep =
        std::thread::panicking() && std::env::var_os(KEEP_VAR).is_some_and(|v| !v.is_empty());
    if keep {
        eprintln!("test failed: {what} left in place for inspection ({KEEP_VAR} is set)");
    }
    keep
}

/// A cleanup that failed fails the test that passed (it would leave its
/// litter on the server for the next run); for one already failing, it is
/// said on stderr.
pub fn report(what: &str, result: Result<(), String>) {
    if let Err(e) = result {
        let msg = format!("cannot remove {what}: {e}");
        if std::thread::panicking() {
            eprintln!("{msg}");
        } else {
            panic!("{msg}");
        }
    }
}

/// Runs `statements` one at a time on a connection of their own, from a
/// thread of their own (a `Drop` may run inside or outside a runtime).
fn admin_blocking(statements: Vec<String>) -> Result<(), String> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            for sql in &statements {
                admin_try(sql).await.map_err(|e| format!("{sql}: {e}"))?;
            }
            Ok(())
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the cleanup thread panicked".into()))
}

/// A throwaway database on the test server (for a sink apart from the
/// outbox), dropped when the test passes, kept when it fails.
#[derive(Debug)]
pub struct TestDatabase {
    /// Its name.
    pub name: String,
}

impl TestDatabase {
    /// Creates `t_<label>_<random>`.
    pub async fn new(label: &str) -> Self {
        Self::with_options(label, "").await
    }

    /// Creates `t_<label>_<random>` with `CREATE DATABASE` options (such as
    /// `ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`).
    pub async fn with_options(label: &str, options: &str) -> Self {
        let name = format!("t_{}_{:08x}", label, rand::random::<u32>());
        outbox::validate_identifier(&name).expect("valid test database name");
        admin(&format!("CREATE DATABASE {name} {options}")).await;
        Self { name }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        let base = database_url();
        let (base, query) = base
            .split_once('?')
            .map_or((base.as_str(), None), |(b, q)| (b, Some(q)));
        let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
        match query {
            Some(q) => format!("{server}/{}?{q}", self.name),
            None => format!("{server}/{}", self.name),
        }
    }

    /// Refuses new connections and cuts the open ones: the database is down
    /// as far as any client can tell.
    pub async fn refuse_connections(&self) {
        admin(&format!(
            "ALTER DATABASE {n} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{n}';",
            n = self.name
        ))
        .await;
    }

    /// Accepts connections again.
    pub async fn accept_connections(&self) {
        admin(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            self.name
        ))
        .await;
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let what = format!("database {}", self.name);
        if keep(&what) {
            return;
        }
        // Two statements, not one batch: PostgreSQL runs a batch in one
        // implicit transaction, which DROP DATABASE refuses (the database
        // was left behind after every run).
        report(
            &what,
            admin_blocking(vec![
                format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.name),
                format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ]),
        );
    }
}

async fn admin(sql: &str) {
    if let Err(e) = admin_try(sql).await {
        panic!("{sql}: {e}");
    }
}

async fn admin_try(sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client.batch_execute(sql).await
}

/// `DATABASE_URL` with its host and port replaced by `127.0.0.1:port` (a
/// proxy in front of the test server), its user, database and parameters
/// kept.
pub fn database_url_via(port: u16) -> String {
    url_via(&database_url(), port)
}

fn url_via(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").expect("DATABASE_URL is a URL");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    format!(
        "{scheme}://{}127.0.0.1:{port}{tail}",
        user.unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_via_a_proxy_keeps_user_database_and_parameters() {
        let via = |url: &str| url_via(url, 9);
        assert_eq!(
            via("postgres://app:pw@db.example:6432/orders?sslmode=disable"),
            "postgres://app:pw@127.0.0.1:9/orders?sslmode=disable"
        );
        assert_eq!(via("postgres://db/x"), "postgres://127.0.0.1:9/x");
    }

    /// Both statements of the database's removal run: the database is
    /// gone once its guard is dropped (as one batch, PostgreSQL refused
    /// DROP DATABASE and the error went unseen).
    #[tokio::test]
    async fn a_test_database_is_gone_after_its_guard() {
        let db = TestDatabase::new("testkit_drop").await;
        db.refuse_connections().await;
        let name = db.name.clone();
        drop(db);
        let (client, conn) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let n: i64 = client
            .query_one(
                "SELECT count(*) AS count FROM pg_database WHERE datname = $1",
                &[&name],
            )
            .await
            .unwrap()
            .try_get("count")
            .expect("count int8");
        assert_eq!(n, 0, "database {name} left behind");
    }
}
