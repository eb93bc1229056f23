//! `bench drain` and `bench baseline`: drain scenarios measured on one
//! backlog shape, each in a fresh schema, so every figure is comparable
//! within one run; and the pieces every scenario shares (fresh schemas,
//! preload, the settled check, the median).
//!
//! The reference algorithms run on a table shaped like the seed lab's
//! (status updated in place); the relay runs on the real outbox schema
//! through the real engine and the PostgreSQL publisher.

use crate::{BenchQueries, Counting, Progress};
use deadpool_postgres::Pool;
use outbox::Schema;
use outbox_relay::admin::get;
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Error, Relay, RelayConfig, Result, Store};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A drain algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// The seed lab: claim 10, then per message one publish and one mark.
    Seed,
    /// One statement per batch: claim, insert into the sink, UPDATE status.
    NaiveUpdate,
    /// One statement per batch: claim, insert into the sink, DELETE — about
    /// what PostgreSQL itself can do.
    DeleteLimit,
    /// The outbox relay: claim, publish, settle (three statements, leased).
    Relay,
    /// The `outbox relay` binary started as a process with its default
    /// settings, timed from launch to the last `sent_at`
    /// ([`crate::drain_process`]).
    RelayProcess,
    /// The relay over the insert-only engine (the draft migration 12,
    /// docs/design/insert-only.md): lanes read, no message row written.
    Lanes,
}

impl Algorithm {
    /// Label used in tables and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Self::Seed => "seed per-message (claim 10)",
            Self::NaiveUpdate => "naive UPDATE batch",
            Self::DeleteLimit => "DELETE one-statement limit",
            Self::Relay => "outbox relay",
            Self::RelayProcess => "outbox relay process",
            Self::Lanes => "outbox relay, insert-only engine (draft)",
        }
    }

    /// Short key used in JSON.
    pub fn key(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::NaiveUpdate => "naive_update",
            Self::DeleteLimit => "delete_limit",
            Self::Relay => "relay",
            Self::RelayProcess => "relay_process",
            Self::Lanes => "lanes",
        }
    }
}

/// One measured drain.
#[derive(Debug, Clone, Copy)]
pub struct DrainResult {
    /// What ran.
    pub algorithm: Algorithm,
    /// Messages drained.
    pub messages: u64,
    /// Wall time from first claim to empty backlog.
    pub elapsed: Duration,
}

impl DrainResult {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }
}

/// What a drain runs on and with, beyond the algorithm.
#[derive(Debug, Clone, Copy)]
pub struct DrainSpec {
    /// Relay pipelines (the relay only).
    pub concurrency: usize,
    /// Messages preloaded.
    pub messages: u64,
    /// Aggregates the outbox backlog is dealt over, round-robin; `None`:
    /// one aggregate per message. The reference algorithms ignore it
    /// (their table has no order to keep).
    pub aggregates: Option<u64>,
    /// Batch size of the relay and of the batch algorithms.
    pub batch_size: usize,
    /// The relay's ordering mode.
    pub ordering: outbox_relay::relay::Ordering,
}

/// Drains a preloaded backlog of `messages` with `algorithm` in a fresh
/// schema of the database behind `pool` (dropped afterwards). Checks that
/// every message was published exactly once before reporting a figure.
pub async fn drain(
    pool: &Pool,
    algorithm: Algorithm,
    concurrency: usize,
    messages: u64,
    batch_size: usize,
    progress: &Progress,
) -> Result<DrainResult> {
    let spec = DrainSpec {
        concurrency,
        messages,
        aggregates: None,
        batch_size,
        ordering: RelayConfig::default().ordering,
    };
    drain_spec(pool, algorithm, &spec, progress).await
}

/// [`drain`] with every knob of [`DrainSpec`].
pub async fn drain_spec(
    pool: &Pool,
    algorithm: Algorithm,
    spec: &DrainSpec,
    progress: &Progress,
) -> Result<DrainResult> {
    let schema = fresh_schema()?;
    let result = drain_in(pool, &schema, algorithm, spec, progress).await;
    drop_schema(pool, &schema).await?;
    result
}

/// Drops a bench schema.
pub(crate) async fn drop_schema(pool: &Pool, schema: &Schema) -> Result<()> {
    let client = pool.get().await?;
    client
        .batch_execute(&BenchQueries::new(schema).drop_schema)
        .await?;
    in_use().retain(|s| s != schema);
    Ok(())
}

/// The schemas this process made with [`fresh_schema`] and has not dropped:
/// process-wide, as what stops a scenario half-way (a signal) is.
static IN_USE: std::sync::Mutex<Vec<Schema>> = std::sync::Mutex::new(Vec::new());

fn in_use() -> std::sync::MutexGuard<'static, Vec<Schema>> {
    IN_USE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drops every schema a scenario stopped half-way left (an interrupted
/// `outbox bench`), on `client`; returns their names. Run it after the
/// statements in flight were cancelled: DROP SCHEMA waits for their locks.
pub async fn drop_leftover_schemas(client: &tokio_postgres::Client) -> Result<Vec<Schema>> {
    let left = in_use().clone();
    for schema in &left {
        client
            .batch_execute(&BenchQueries::new(schema).drop_schema)
            .await?;
        in_use().retain(|s| s != schema);
    }
    Ok(left)
}

/// Migrates `schema` and preloads the backlog `algorithm` drains: the
/// outbox table for the relay, the seed-shaped table for the references.
pub(crate) async fn prepare(
    pool: &Pool,
    schema: &Schema,
    algorithm: Algorithm,
    spec: &DrainSpec,
) -> Result<()> {
    let bq = BenchQueries::new(schema);
    let n = spec.messages as i64;
    let client = pool.get().await?;
    outbox::migrate(&**client, schema).await?;
    if algorithm == Algorithm::Lanes {
        client
            .batch_execute(&outbox::sql::render(outbox::sql::INSERT_ONLY_DRAFT, schema))
            .await?;
    }
    if matches!(
        algorithm,
        Algorithm::Relay | Algorithm::RelayProcess | Algorithm::Lanes
    ) {
        match spec.aggregates {
            Some(a) => {
                client
                    .execute(&bq.preload_outbox_spread, &[&n, &(a.max(1) as i64)])
                    .await?
            }
            None => client.execute(&bq.preload_outbox, &[&n]).await?,
        };
        client.batch_execute(&bq.vacuum_messages).await?;
    } else {
        client.batch_execute(&bq.seed_create).await?;
        client.execute(&bq.seed_preload, &[&n]).await?;
        client.batch_execute(&bq.vacuum_seed).await?;
    }
    // Start every timed drain from a clean slate: the preload's (and the
    // previous run's) dirty pages written out now, not by a checkpoint
    // landing in the middle of whichever algorithm runs next. Needs
    // superuser or pg_checkpoint; without it, runs are only noisier.
    if let Err(e) = client.batch_execute(&bq.checkpoint).await {
        tracing::debug!(error = %e, "no CHECKPOINT before the drain");
    }
    Ok(())
}

/// Checks that every message of the backlog was published exactly once
/// and none is left unsettled.
pub(crate) async fn check_drained(
    pool: &Pool,
    schema: &Schema,
    algorithm: Algorithm,
    n: i64,
) -> Result<()> {
    let bq = BenchQueries::new(schema);
    let client = pool.get().await?;
    let published: i64 = get(
        &client.query_one(&bq.published_distinct, &[]).await?,
        "count",
    )?;
    let unsent = match algorithm {
        Algorithm::Relay | Algorithm::RelayProcess => &bq.unsettled,
        Algorithm::Lanes => &bq.not_sent_anywhere,
        _ => &bq.seed_unsent,
    };
    let unsent: i64 = get(&client.query_one(unsent, &[]).await?, "count")?;
    if published != n || unsent != 0 {
        return Err(Error::Check(format!(
            "{}: drained {published} of {n} messages ({unsent} left unsent)",
            algorithm.label()
        )));
    }
    Ok(())
}

async fn drain_in(
    pool: &Pool,
    schema: &Schema,
    algorithm: Algorithm,
    spec: &DrainSpec,
    progress: &Progress,
) -> Result<DrainResult> {
    let bq = BenchQueries::new(schema);
    let messages = spec.messages;
    let limit = spec.batch_size as i64;
    prepare(pool, schema, algorithm, spec).await?;
    let done = progress.start(algorithm.key(), messages);
    let started = Instant::now();
    match algorithm {
        Algorithm::Seed => {
            let client = pool.get().await?;
            let claim = client.prepare(&bq.seed_claim).await?;
            let publish = client.prepare(&bq.seed_publish_one).await?;
            let mark = client.prepare(&bq.seed_mark_sent_one).await?;
            loop {
                let rows = client.query(&claim, &[&10_i64, &"bench"]).await?;
                if rows.is_empty() {
                    break;
                }
                for row in rows {
                    let (id, topic, payload): (i64, String, serde_json::Value) =
                        (get(&row, "id")?, get(&row, "topic")?, get(&row, "payload")?);
                    client
                        .execute(&publish, &[&id, &topic, &payload, &"bench"])
                        .await?;
                    client.execute(&mark, &[&id, &"bench"]).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Algorithm::NaiveUpdate | Algorithm::DeleteLimit => {
            let client = pool.get().await?;
            let sql = if algorithm == Algorithm::NaiveUpdate {
                &bq.naive_update_batch
            } else {
                &bq.delete_batch
            };
            let stmt = client.prepare(sql).await?;
            loop {
                let n = client.execute(&stmt, &[&limit, &"bench"]).await?;
                if n == 0 {
                    break;
                }
                done.fetch_add(n, Ordering::Relaxed);
            }
        }
        Algorithm::Relay | Algorithm::Lanes => {
            let config = RelayConfig {
                relay_id: "bench".into(),
                batch_size: spec.batch_size,
                concurrency: spec.concurrency,
                notify: false,
                idle_sleep: Duration::from_millis(5),
                ordering: spec.ordering,
                ..RelayConfig::default()
            };
            let publisher = Counting::new(
                PostgresPublisher::new(pool.clone(), schema, "bench"),
                done.clone(),
            );
            let relay = Relay::new(Store::new(pool.clone(), schema.clone()), publisher, config)?;
            // The real loop (every pipeline, the reaper), stopped once the
            // backlog is gone. The check reads the first entry of the
            // claimable index, so it costs the database next to nothing; a
            // count would scan the table every few milliseconds and slow
            // down what it measures.
            let stop = tokio_util::sync::CancellationToken::new();
            let watch = async {
                match algorithm {
                    // No row changes state in the hot path: the count of
                    // messages published says when it is done, and the
                    // shutdown settles the last batch (within the time).
                    Algorithm::Lanes => {
                        while done.load(Ordering::Relaxed) < messages {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    _ => wait_until_settled(&**pool.get().await?, &bq).await?,
                }
                stop.cancel();
                Ok::<_, Error>(())
            };
            let (ran, watched) = tokio::join!(relay.run(stop.clone()), watch);
            ran?;
            watched?;
        }
        Algorithm::RelayProcess => {
            return Err(Error::config(
                "a relay process is drained with outbox_bench::drain_process",
            ))
        }
    }
    let elapsed = started.elapsed();
    check_drained(pool, schema, algorithm, messages as i64).await?;
    Ok(DrainResult {
        algorithm,
        messages,
        elapsed,
    })
}

/// Waits until no outbox message is left unsettled. Each look starts at
/// the last unsettled id seen (a drain moves forward), so it does not walk
/// past the index entries of everything already sent, which would slow the
/// relay it watches; a last look from id 0 makes sure nothing went back.
pub async fn wait_until_settled(client: &tokio_postgres::Client, bq: &BenchQueries) -> Result<()> {
    wait_until_settled_or(client, bq, |_| Ok(())).await
}

/// [`wait_until_settled`], calling `each` with the first unsettled id seen
/// between looks (progress; a watched process that died fails the wait).
pub(crate) async fn wait_until_settled_or(
    client: &tokio_postgres::Client,
    bq: &BenchQueries,
    mut each: impl FnMut(i64) -> Result<()>,
) -> Result<()> {
    let stmt = client.prepare(&bq.first_unsettled).await?;
    let mut from = 0_i64;
    loop {
        match client.query_opt(&stmt, &[&from]).await? {
            Some(row) => {
                from = get(&row, "id")?;
                each(from)?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            None if from == 0 => return Ok(()),
            None => from = 0,
        }
    }
}

/// A schema name no other bench run uses.
/// Recorded before anything creates it, so an interrupt at any point after
/// finds it ([`drop_leftover_schemas`]).
pub(crate) fn fresh_schema() -> Result<Schema> {
    let schema = Schema::new(&format!("outbox_bench_{:08x}", rand::random::<u32>()))?;
    in_use().push(schema.clone());
    Ok(schema)
}

/// The median of `values` (upper median for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Peak resident memory of this process (an in-process relay runs in it),
/// in bytes, from the kernel's high-water mark; `None` off Linux.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_upper_one_for_an_even_count() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
    }
}
