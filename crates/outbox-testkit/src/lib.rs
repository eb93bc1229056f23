//! Each database test gets its own schema on the real PostgreSQL
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`).
//! The schema is dropped when the test passes and left in place when it
//! fails, so it can be inspected.

pub mod order_check;
pub mod ordering;
mod proxy;
pub mod readback;
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
        client
            .query_one(sql.as_str(), &[])
            .await
            .expect(&sql)
            .get(0)
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
        if std::thread::panicking() {
            eprintln!(
                "test failed: schema {} left in place for inspection",
                self.schema
            );
            return;
        }
        // Drop on a plain connection of our own: the pool's runtime may be
        // shutting down with the test.
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema.quoted());
        let url = database_url();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .ok()?;
                tokio::spawn(conn);
                client.batch_execute(&sql).await.ok()
            })
        })
        .join();
    }
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
        if std::thread::panicking() {
            eprintln!(
                "test failed: database {} left in place for inspection",
                self.name
            );
            return;
        }
        // Two statements, not one batch: PostgreSQL runs a batch in one
        // implicit transaction, which DROP DATABASE refuses (the database
        // was left behind after every run).
        let allow = format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.name);
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let _ = admin_try(&allow).await;
                admin_try(&drop).await
            })
        })
        .join();
    }
}

async fn admin(sql: &str) {
    admin_try(sql).await.unwrap_or_else(|| panic!("{sql}"));
}

async fn admin_try(sql: &str) -> Option<()> {
    let (client, conn) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    client.batch_execute(sql).await.ok()
}
