//! `outbox bench`: drain scenarios measured on one backlog shape, each in a
//! fresh schema, so every figure is comparable within one run.
//!
//! The reference algorithms run on a table shaped like the seed lab's
//! (status updated in place); the relay runs on the real outbox schema
//! through the real engine and the PostgreSQL publisher.

mod latency;
mod produce;
mod progress;
mod soak;
pub use latency::{idle_queries_per_second, latency, Latency};
pub use produce::{produce, ProduceMode, ProduceParams, ProduceResult};
pub use progress::{Counting, Progress};
pub use soak::{soak, Soak, SoakParams, SoakSlice};

use crate::publishers::postgres::PostgresPublisher;
use crate::{Error, Relay, RelayConfig, Result, Store};
use deadpool_postgres::Pool;
use outbox::sql::{BenchQueries, Queries};
use outbox::Schema;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
}

impl Algorithm {
    /// Label used in tables and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Self::Seed => "seed per-message (claim 10)",
            Self::NaiveUpdate => "naive UPDATE batch",
            Self::DeleteLimit => "DELETE one-statement limit",
            Self::Relay => "outbox relay",
        }
    }

    /// Short key used in JSON.
    pub fn key(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::NaiveUpdate => "naive_update",
            Self::DeleteLimit => "delete_limit",
            Self::Relay => "relay",
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
    let schema = fresh_schema()?;
    let result = drain_in(
        pool,
        &schema,
        algorithm,
        concurrency,
        messages,
        batch_size,
        progress,
    )
    .await;
    let client = pool.get().await?;
    client
        .batch_execute(&BenchQueries::new(&schema).drop_schema)
        .await?;
    result
}

async fn drain_in(
    pool: &Pool,
    schema: &Schema,
    algorithm: Algorithm,
    concurrency: usize,
    messages: u64,
    batch_size: usize,
    progress: &Progress,
) -> Result<DrainResult> {
    let bq = BenchQueries::new(schema);
    let q = Arc::new(Queries::new(schema));
    let n = messages as i64;
    let limit = batch_size as i64;
    {
        let client = pool.get().await?;
        outbox::migrate(&**client, schema).await?;
        if algorithm == Algorithm::Relay {
            client.execute(&bq.preload_outbox, &[&n]).await?;
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
    }
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
                        (row.get(0), row.get(1), row.get(2));
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
        Algorithm::Relay => {
            let config = RelayConfig {
                relay_id: "bench".into(),
                batch_size,
                concurrency,
                notify: false,
                idle_sleep: Duration::from_millis(5),
                ..RelayConfig::default()
            };
            let publisher = Counting::new(
                PostgresPublisher::new(pool.clone(), q.clone(), "bench"),
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
                wait_until_settled(&**pool.get().await?, &bq).await?;
                stop.cancel();
                Ok::<_, Error>(())
            };
            let (ran, watched) = tokio::join!(relay.run(stop.clone()), watch);
            ran?;
            watched?;
        }
    }
    let elapsed = started.elapsed();
    let client = pool.get().await?;
    let published: i64 = client.query_one(&bq.published_distinct, &[]).await?.get(0);
    let unsent: i64 = if algorithm == Algorithm::Relay {
        client.query_one(&q.demo_unsettled, &[]).await?.get(0)
    } else {
        client.query_one(&bq.seed_unsent, &[]).await?.get(0)
    };
    if published != n || unsent != 0 {
        return Err(Error::Check(format!(
            "{}: drained {published} of {n} messages ({unsent} left unsent)",
            algorithm.label()
        )));
    }
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
async fn wait_until_settled(client: &tokio_postgres::Client, bq: &BenchQueries) -> Result<()> {
    let stmt = client.prepare(&bq.first_unsettled).await?;
    let mut from = 0_i64;
    loop {
        match client.query_opt(&stmt, &[&from]).await? {
            Some(row) => {
                from = row.get(0);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            None if from == 0 => return Ok(()),
            None => from = 0,
        }
    }
}

/// A schema name no other bench run uses.
fn fresh_schema() -> Result<Schema> {
    Ok(Schema::new(&format!(
        "outbox_bench_{:08x}",
        rand::random::<u32>()
    ))?)
}

/// The median of `values` (upper median for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
