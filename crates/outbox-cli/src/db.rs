//! Connecting: the URL from `--database-url`/`DATABASE_URL`, or for the demo
//! a throwaway PostgreSQL.

use anyhow::{bail, Context};
use outbox_relay::publishers::redact_url;

/// The outbox database URL, or a clear error naming `DATABASE_URL`.
pub fn require_url(url: Option<String>) -> anyhow::Result<String> {
    match url {
        Some(u) if !u.trim().is_empty() => Ok(u),
        _ => bail!("no database given: set DATABASE_URL (or pass --database-url), e.g. postgres://postgres@127.0.0.1:5432/postgres"),
    }
}

/// A pool on `url`, checked by opening one connection, so a wrong URL fails
/// here with one sentence instead of later.
pub async fn connect(url: &str, max_size: usize) -> anyhow::Result<deadpool_postgres::Pool> {
    let pool = outbox_relay::pool(url, max_size)?;
    let _probe = pool
        .get()
        .await
        .with_context(|| format!("cannot connect to {}", redact_url(url)))?;
    Ok(pool)
}
