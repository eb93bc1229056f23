//! `bench soak`: a large backlog through the relay, timed slice by slice,
//! with the hot table's size and dead tuples after each slice. Run once
//! as is, and once with a REPEATABLE READ transaction held open (a long
//! report, a forgotten `psql` session): while it is open PostgreSQL can
//! reclaim nothing the relay deletes or rewrites, which is what makes
//! queues that UPDATE a status column collapse.

use crate::drain::{drop_schema, fresh_schema, wait_until_settled};
use crate::{median, BenchQueries, Counting, Progress};
use deadpool_postgres::Pool;
use outbox::Schema;
use outbox_relay::admin::get;
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Error, Relay, RelayConfig, Result, Store};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What `bench soak` runs.
#[derive(Debug, Clone, Copy)]
pub struct SoakParams {
    /// Messages preloaded and drained.
    pub messages: u64,
    /// Messages per measured slice (100,000 in the terms).
    pub slice: u64,
    /// Relay batch size.
    pub batch_size: usize,
    /// Relay pipelines.
    pub concurrency: usize,
    /// Hold a REPEATABLE READ transaction open this long from the start of
    /// the drain (or until it ends, if sooner).
    pub hold: Option<Duration>,
}

/// One slice of the soak.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SoakSlice {
    /// Messages published when the slice ended.
    pub published: u64,
    /// Messages per second within the slice.
    pub msgs_per_sec: f64,
    /// `messages` heap size, bytes.
    pub hot_table_bytes: i64,
    /// Size of every index on `messages`, bytes.
    pub hot_index_bytes: i64,
    /// Dead tuples in `messages` as the statistics collector counts them.
    pub dead_tuples: i64,
}

/// A whole soak.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Soak {
    /// Slices in order.
    pub slices: Vec<SoakSlice>,
    /// Whole drain, messages per second.
    pub msgs_per_sec: f64,
    /// How long the REPEATABLE READ transaction was really held.
    pub held_seconds: Option<f64>,
}

impl Soak {
    /// Last slice's rate over the first's: 1.0 means no decay.
    pub fn last_over_first(&self) -> f64 {
        match (self.slices.first(), self.slices.last()) {
            (Some(f), Some(l)) if f.msgs_per_sec > 0.0 => l.msgs_per_sec / f.msgs_per_sec,
            _ => 0.0,
        }
    }
}

/// The run with the median last-over-first ratio (the upper one for an
/// even count), and the median of that ratio.
pub fn median_run(mut soaks: Vec<Soak>) -> (Soak, f64) {
    let ratio = median(&mut soaks.iter().map(Soak::last_over_first).collect::<Vec<_>>());
    soaks.sort_by(|a, b| a.last_over_first().total_cmp(&b.last_over_first()));
    let mid = soaks.swap_remove(soaks.len() / 2);
    (mid, ratio)
}

/// Runs one soak in a fresh schema (dropped afterwards). `progress` counts
/// messages preloaded, then published.
pub async fn soak(pool: &Pool, p: SoakParams, progress: &Progress) -> Result<Soak> {
    if p.slice == 0 || p.messages < p.slice {
        return Err(Error::config(format!(
            "a soak needs at least one slice: {} messages, slices of {}",
            p.messages, p.slice
        )));
    }
    let schema = fresh_schema()?;
    let result = soak_in(pool, &schema, p, progress).await;
    drop_schema(pool, &schema).await?;
    result
}

async fn soak_in(pool: &Pool, schema: &Schema, p: SoakParams, progress: &Progress) -> Result<Soak> {
    let bq = BenchQueries::new(schema);
    {
        let client = pool.get().await?;
        outbox::migrate(&**client, schema).await?;
        progress.start("preload", p.messages);
        let mut loaded = 0;
        while loaded < p.messages {
            let n = (p.messages - loaded).min(100_000);
            client
                .execute(&bq.preload_outbox_from, &[&(n as i64), &(loaded as i64)])
                .await?;
            loaded += n;
            progress.set(loaded);
        }
        client.batch_execute(&bq.vacuum_messages).await?;
    }
    let published = progress.start("soak", p.messages);
    let relay = Relay::new(
        Store::new(pool.clone(), schema.clone()),
        Counting::new(
            PostgresPublisher::new(pool.clone(), schema, "bench"),
            published.clone(),
        ),
        RelayConfig {
            relay_id: "bench".into(),
            batch_size: p.batch_size,
            concurrency: p.concurrency,
            notify: false,
            idle_sleep: Duration::from_millis(5),
            ..RelayConfig::default()
        },
    )?;
    let stop = CancellationToken::new();
    let drained = CancellationToken::new();
    // The held transaction reads the outbox, so its snapshot is taken
    // before the first claim and keeps every version the relay leaves.
    let holder = async {
        let Some(hold) = p.hold else {
            return Ok::<_, Error>(None);
        };
        let mut client = pool.get().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await?;
        tx.query(&bq.first_unsettled, &[&0_i64]).await?;
        let since = Instant::now();
        tokio::select! {
            _ = tokio::time::sleep(hold) => {}
            _ = drained.cancelled() => {}
        }
        tx.rollback().await?;
        Ok(Some(since.elapsed()))
    };
    let watch = async {
        let client = pool.get().await?;
        let mut slices = Vec::new();
        let (started, mut slice_start) = (Instant::now(), Instant::now());
        let mut next = p.slice;
        while next <= p.messages {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if published.load(Ordering::Relaxed) < next {
                continue;
            }
            let elapsed = slice_start.elapsed();
            slice_start = Instant::now();
            let row = client.query_one(&bq.hot_table_health, &[]).await?;
            slices.push(SoakSlice {
                published: next,
                msgs_per_sec: p.slice as f64 / elapsed.as_secs_f64(),
                hot_table_bytes: get(&row, "heap_bytes")?,
                hot_index_bytes: get(&row, "index_bytes")?,
                dead_tuples: get(&row, "dead_tuples")?,
            });
            next += p.slice;
        }
        // Published is not yet settled: wait for the last settlements.
        wait_until_settled(&client, &bq).await?;
        let total = started.elapsed();
        drained.cancel();
        stop.cancel();
        Ok::<_, Error>((slices, total))
    };
    let (ran, watched, held) = tokio::join!(relay.run(stop.clone()), watch, holder);
    ran?;
    let (slices, total) = watched?;
    let held = held?;
    let client = pool.get().await?;
    let sent: i64 = get(&client.query_one(&bq.sent_count, &[]).await?, "count")?;
    if sent as u64 != p.messages {
        return Err(Error::Check(format!(
            "soak: {sent} of {} messages sent",
            p.messages
        )));
    }
    Ok(Soak {
        slices,
        msgs_per_sec: p.messages as f64 / total.as_secs_f64(),
        held_seconds: held.map(|d| d.as_secs_f64()),
    })
}
