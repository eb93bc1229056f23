//! `bench produce`: what enqueuing costs the producer. Transactions per
//! second, each one message in its own transaction as an application would
//! commit it, through the library against the hand-written INSERT a team
//! would write without it; with the NOTIFY trigger on and off.

use crate::drain::{drop_schema, fresh_schema};
use crate::{BenchQueries, Progress};
use deadpool_postgres::Pool;
use outbox::{NewMessage, Outbox, Schema};
use outbox_relay::admin::get;
use outbox_relay::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a producer writes its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceMode {
    /// `Outbox::enqueue` (validation, UUIDv7 event id, headers).
    Library,
    /// `INSERT INTO messages (event_type, aggregate_type, aggregate_id,
    /// topic, payload) VALUES (...)`, the rest left to column defaults.
    HandInsert,
}

impl ProduceMode {
    /// Label for tables and JSON.
    pub fn key(self) -> &'static str {
        match self {
            Self::Library => "library",
            Self::HandInsert => "hand_insert",
        }
    }
}

/// The cases of `bench produce`, `(mode, NOTIFY trigger on)`, in the
/// order each run measures them.
pub const PRODUCE_CASES: [(ProduceMode, bool); 4] = [
    (ProduceMode::HandInsert, true),
    (ProduceMode::Library, true),
    (ProduceMode::HandInsert, false),
    (ProduceMode::Library, false),
];

/// A case's key in tables and JSON: `library_notify`, `hand_insert_no_notify`...
pub fn produce_key(mode: ProduceMode, notify: bool) -> String {
    format!(
        "{}_{}",
        mode.key(),
        if notify { "notify" } else { "no_notify" }
    )
}

/// The library's rate over the hand-written INSERT's, NOTIFY on or off,
/// from rates by [`produce_key`].
pub fn library_over_hand_insert(rates: &BTreeMap<String, f64>, notify: bool) -> f64 {
    rates[&produce_key(ProduceMode::Library, notify)]
        / rates[&produce_key(ProduceMode::HandInsert, notify)]
}

/// What one `produce` run does.
#[derive(Debug, Clone, Copy)]
pub struct ProduceParams {
    /// Transactions in all, shared among the producers.
    pub transactions: u64,
    /// Producer connections committing in parallel.
    pub producers: usize,
    /// Whether the NOTIFY trigger stays on.
    pub notify: bool,
    /// Library or hand-written INSERT.
    pub mode: ProduceMode,
}

/// One measured run.
#[derive(Debug, Clone, Copy)]
pub struct ProduceResult {
    /// Transactions committed.
    pub transactions: u64,
    /// Wall time of all producers.
    pub elapsed: Duration,
}

impl ProduceResult {
    /// Committed transactions per second.
    pub fn rate(&self) -> f64 {
        self.transactions as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs the producers in a fresh schema (dropped afterwards) and checks
/// that every transaction left exactly one row.
pub async fn produce(pool: &Pool, p: ProduceParams, progress: &Progress) -> Result<ProduceResult> {
    if p.producers == 0 || p.transactions == 0 {
        return Err(Error::config(
            "produce needs at least one producer and one transaction",
        ));
    }
    let schema = fresh_schema()?;
    let result = produce_in(pool, &schema, p, progress).await;
    drop_schema(pool, &schema).await?;
    result
}

async fn produce_in(
    pool: &Pool,
    schema: &Schema,
    p: ProduceParams,
    progress: &Progress,
) -> Result<ProduceResult> {
    let bq = BenchQueries::new(schema);
    {
        let client = pool.get().await?;
        outbox::migrate(&**client, schema).await?;
        if !p.notify {
            client.batch_execute(&bq.notify_off).await?;
        }
    }
    let done = progress.start(p.mode.key(), p.transactions);
    let outbox = Outbox::with_schema(schema.clone());
    let started = Instant::now();
    let producers = (0..p.producers as u64).map(|k| {
        let (outbox, bq, done) = (outbox.clone(), &bq, done.clone());
        async move {
            let mut pooled = pool.get().await?;
            // The driver's own client, as an application holds it.
            let client: &mut tokio_postgres::Client = &mut pooled;
            for i in (k..p.transactions).step_by(p.producers) {
                let payload = serde_json::json!({"i": i, "pad": "x".repeat(100)});
                let tx = client.transaction().await?;
                match p.mode {
                    ProduceMode::Library => {
                        let msg = NewMessage::new("bench.event", "bench", i.to_string(), &payload)?
                            .topic("bench");
                        outbox.enqueue(&tx, &msg).await?;
                    }
                    ProduceMode::HandInsert => {
                        tx.execute(
                            &bq.hand_insert,
                            &[&"bench.event", &"bench", &i.to_string(), &"bench", &payload],
                        )
                        .await?;
                    }
                }
                tx.commit().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, Error>(())
        }
    });
    futures_util::future::try_join_all(producers).await?;
    let elapsed = started.elapsed();
    check_rows(pool, &bq, p.transactions, &done).await?;
    Ok(ProduceResult {
        transactions: p.transactions,
        elapsed,
    })
}

async fn check_rows(
    pool: &Pool,
    bq: &BenchQueries,
    want: u64,
    done: &Arc<AtomicU64>,
) -> Result<()> {
    let row = pool.get().await?.query_one(&bq.outbox_rows, &[]).await?;
    let rows: i64 = get(&row, "count")?;
    if rows as u64 != want || done.load(Ordering::Relaxed) != want {
        return Err(Error::Check(format!(
            "produce: {rows} rows for {want} transactions"
        )));
    }
    Ok(())
}
