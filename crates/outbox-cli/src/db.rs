//! Connecting: the URL from `--database-url`/`DATABASE_URL`, or for the demo
//! a throwaway PostgreSQL.

use anyhow::Context;
use outbox_relay::redact::redact;

/// The outbox database URL, or a clear error naming `DATABASE_URL`.
pub fn require_url(url: Option<String>) -> anyhow::Result<String> {
    match url {
        Some(u) if !u.trim().is_empty() => Ok(u),
        _ => outbox_cli::usage("no database given: set DATABASE_URL (or pass --database-url), e.g. postgres://postgres@127.0.0.1:5432/postgres"),
    }
}

/// A pool on `url`, checked by opening one connection, so a wrong URL fails
/// here with one sentence instead of later.
pub async fn connect(url: &str, max_size: usize) -> anyhow::Result<deadpool_postgres::Pool> {
    connect_as(
        url,
        max_size,
        outbox_relay::connect::DEFAULT_APPLICATION_NAME,
    )
    .await
}

/// [`connect`], the connections named `name` in `pg_stat_activity`
/// unless the URL names them.
pub async fn connect_as(
    url: &str,
    max_size: usize,
    name: &str,
) -> anyhow::Result<deadpool_postgres::Pool> {
    let target = outbox_relay::connect::target(url)?.named(name);
    let pool = outbox_relay::pool_for(target, max_size)?;
    // The connection goes back to the pool: it only proved the URL works.
    drop(
        pool.get()
            .await
            .with_context(|| format!("cannot connect to {}", redact(url)))?,
    );
    Ok(pool)
}

/// [`connect`], each connection's cancel key kept in `cancels`, so an
/// interrupted command can cancel what its statements still run on the
/// server.
pub async fn connect_cancellable(
    url: &str,
    max_size: usize,
    cancels: &outbox_relay::connect::Cancels,
) -> anyhow::Result<deadpool_postgres::Pool> {
    let target =
        outbox_relay::connect::target(url)?.named(outbox_relay::connect::DEFAULT_APPLICATION_NAME);
    let pool = outbox_relay::pool_cancellable(target, max_size, cancels)?;
    drop(
        pool.get()
            .await
            .with_context(|| format!("cannot connect to {}", redact(url)))?,
    );
    Ok(pool)
}

/// `url`, or without one a throwaway PostgreSQL started for this command
/// (it lives as long as the returned guard). Says where it is, on stderr.
pub fn url_or_throwaway(
    url: Option<String>,
    fsync: bool,
) -> anyhow::Result<(String, Option<outbox_tempdb::EmbeddedPostgres>)> {
    if let Some(u) = url.filter(|u| !u.trim().is_empty()) {
        return Ok((u, None));
    }
    let pg = outbox_tempdb::EmbeddedPostgres::start(fsync)?;
    eprintln!(
        "no DATABASE_URL: started a throwaway PostgreSQL at {} (fsync {}, data in {}); it is removed on exit",
        pg.url(),
        if fsync { "on" } else { "off" },
        pg.path().display()
    );
    Ok((pg.url(), Some(pg)))
}
