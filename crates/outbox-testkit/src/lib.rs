//! Each database test gets its own schema on the real PostgreSQL
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`).
//! The schema is dropped when the test passes and left in place when it
//! fails, so it can be inspected.

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
