//! `bench latency` and `bench idle`: how fast a committed message is
//! published while producers commit at a steady rate, and how quiet an idle
//! relay is.

use crate::drain::{drop_schema, fresh_schema};
use crate::BenchQueries;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use outbox::{NewMessage, Outbox, Schema};
use outbox_relay::admin::get;
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Error, Relay, RelayConfig, Result, Store};
use std::collections::HashMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Commit-to-publish latency percentiles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// Messages measured.
    pub messages: usize,
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Worst.
    pub max: Duration,
}

/// Producers commit one message per transaction at `rate` messages/s for
/// `seconds` while a relay (with NOTIFY on or off) runs; latency is from each
/// producer's commit acknowledgement to the moment the relay settled the
/// message after the destination acknowledged it (`sent_at`), a
/// conservative measure of commit → publish.
pub async fn latency(
    pool: &Pool,
    url: &str,
    rate: u32,
    seconds: u32,
    notify: bool,
) -> Result<Latency> {
    let schema = fresh_schema()?;
    {
        let client = pool.get().await?;
        outbox::migrate(&**client, &schema).await?;
    }
    let result = latency_in(pool, url, &schema, rate, seconds, notify).await;
    drop_schema(pool, &schema).await?;
    result
}

async fn latency_in(
    pool: &Pool,
    url: &str,
    schema: &Schema,
    rate: u32,
    seconds: u32,
    notify: bool,
) -> Result<Latency> {
    let bq = BenchQueries::new(schema);
    let config = RelayConfig {
        relay_id: "bench".into(),
        notify,
        ..RelayConfig::default()
    };
    let listen = url.parse::<outbox_relay::connect::Target>()?;
    let relay = Relay::new(
        Store::new(pool.clone(), schema.clone()),
        PostgresPublisher::new(pool.clone(), schema, "bench"),
        config,
    )?
    .with_listener(listen);
    let stop = CancellationToken::new();
    let total = (rate * seconds) as usize;
    // Several producers, each its own connection, so a slow commit does not
    // hold back the schedule of the others.
    let producers = 4.min(total.max(1));
    let produce = async {
        tokio::time::sleep(Duration::from_millis(300)).await; // relay listening
        let outbox = Outbox::with_schema(schema.clone());
        let per = Duration::from_secs_f64(producers as f64 / f64::from(rate));
        let tasks = (0..producers).map(|p| {
            let outbox = outbox.clone();
            async move {
                let client = pool.get().await?;
                let mut tick = tokio::time::interval(per);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut acks = Vec::new();
                for i in (p..total).step_by(producers) {
                    tick.tick().await;
                    let msg = NewMessage::new(
                        "bench.event",
                        "bench",
                        i.to_string(),
                        &serde_json::json!({"i": i}),
                    )?;
                    let e = outbox.enqueue(&**client, &msg).await?;
                    acks.push((e.event_id, Utc::now()));
                }
                Ok::<_, Error>(acks)
            }
        });
        let acks: Vec<Vec<(Uuid, DateTime<Utc>)>> =
            futures_util::future::try_join_all(tasks).await?;
        let client = pool.get().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let sent: i64 = get(&client.query_one(&bq.sent_count, &[]).await?, "count")?;
            if sent as usize >= total || tokio::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
        Ok::<_, Error>(acks.into_iter().flatten().collect::<HashMap<_, _>>())
    };
    let (ran, acks) = tokio::join!(relay.run(stop.clone()), produce);
    ran?;
    let acks = acks?;
    let client = pool.get().await?;
    let rows = client.query(&bq.sent_times, &[]).await?;
    let mut lat = Vec::with_capacity(rows.len());
    for r in &rows {
        let Some(acked) = acks.get(&get::<Uuid>(r, "event_id")?) else {
            continue;
        };
        let sent: DateTime<Utc> = get(r, "sent_at")?;
        lat.push((sent - *acked).to_std().unwrap_or(Duration::ZERO));
    }
    if lat.len() != total {
        return Err(Error::Check(format!(
            "only {} of {total} messages were published within 60 s",
            lat.len()
        )));
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    Ok(Latency {
        messages: lat.len(),
        p50: pct(0.50),
        p95: pct(0.95),
        p99: pct(0.99),
        max: *lat.last().expect("non-empty"),
    })
}

/// Runs an idle relay for `seconds` in a fresh schema and returns the
/// statements per second it sent to the database (counted by its store; the
/// LISTEN connection sends none while idle).
pub async fn idle_queries_per_second(
    pool: &Pool,
    url: &str,
    seconds: u32,
    notify: bool,
) -> Result<f64> {
    let schema = fresh_schema()?;
    outbox::migrate(&**pool.get().await?, &schema).await?;
    let result = async {
        let relay = Relay::new(
            Store::new(pool.clone(), schema.clone()),
            PostgresPublisher::new(pool.clone(), &schema, "bench"),
            RelayConfig {
                relay_id: "bench".into(),
                notify,
                ..RelayConfig::default()
            },
        )?
        .with_listener(url.parse::<outbox_relay::connect::Target>()?);
        let stop = CancellationToken::new();
        let measure = async {
            tokio::time::sleep(Duration::from_secs(2)).await; // past start-up
            let before = relay.store().statements_issued();
            tokio::time::sleep(Duration::from_secs(u64::from(seconds))).await;
            let after = relay.store().statements_issued();
            stop.cancel();
            (after - before) as f64 / f64::from(seconds)
        };
        let (ran, qps) = tokio::join!(relay.run(stop.clone()), measure);
        ran.map(|()| qps)
    }
    .await;
    drop_schema(pool, &schema).await?;
    result
}
