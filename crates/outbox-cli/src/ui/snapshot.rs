//! One snapshot for every viewer. A single task counts at most once per
//! interval, and only while someone watches (an SSE client is connected,
//! or a page load asked), and hands the result to every client through a
//! watch channel: fifty open pages cost the database what one does. The
//! HTML each client receives is rendered here too, once per snapshot.

use super::{Ui, LIVE_DEAD, MAX_RELAYS, MAX_TOPICS, SHOWN_TEXT};
use chrono::{DateTime, Utc};
use outbox_relay::admin::{cut, DeadSummary, HotCount, RecentReplay, RegisteredRelay, Timestamp};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Reads the breaker's state where the page runs inside a relay:
/// `Some(true)` while open.
pub type BreakerSource = Arc<dyn Fn() -> Option<bool> + Send + Sync>;

/// Throughput samples kept: five minutes at the default interval.
const SAMPLES: usize = 150;
/// Replays listed.
const REPLAYS: i64 = 20;
/// A snapshot that takes longer than this is abandoned and shown as an error.
const COUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// A slow count (a huge backlog) spaces snapshots further: the page keeps
/// the database busy at most one part in this many of one connection's time.
const DUTY: u32 = 10;

/// Statuses of the hot table, in the order the page shows them.
pub const STATUSES: [&str; 4] = ["pending", "processing", "failed", "dead"];

/// A relay seen: holding claims, registered for ordering, or both.
#[derive(Debug, Clone, Default)]
pub struct RelaySeen {
    pub id: String,
    pub in_flight: i64,
    pub last_claim: Option<Timestamp>,
    pub ordering: Option<String>,
    pub lease_until: Option<Timestamp>,
}

/// What every viewer sees.
#[derive(Debug)]
pub struct Snapshot {
    /// 1 for the first snapshot computed, then one more each time; 0 for
    /// the placeholder before any.
    pub seq: u64,
    pub taken: Instant,
    pub taken_at: DateTime<Utc>,
    /// How long the count took.
    pub took: Duration,
    /// Why this snapshot has no numbers, if it has none.
    pub error: Option<String>,
    /// Rows of the hot table by status.
    pub totals: BTreeMap<String, i64>,
    /// Rows of the hot table by topic (its name cut to [`SHOWN_TEXT`]),
    /// then status: the [`MAX_TOPICS`] topics with the most rows.
    pub topics: BTreeMap<String, BTreeMap<String, i64>>,
    /// Topics beyond [`MAX_TOPICS`], counted in the totals but not listed.
    pub topics_left_out: usize,
    /// Relays beyond [`MAX_RELAYS`], not listed.
    pub relays_left_out: usize,
    pub oldest_pending: Option<Duration>,
    /// The sent table's rows, as the statistics collector counts them.
    pub sent_estimate: i64,
    /// Messages sent per second between consecutive snapshots, oldest first.
    pub throughput: Vec<f64>,
    pub relays: Vec<RelaySeen>,
    pub breaker: Option<bool>,
    /// The newest dead letters.
    pub dead: Vec<DeadSummary>,
    pub replays: Vec<RecentReplay>,
    /// The SSE event's data: one line of JSON holding the rendered HTML.
    pub event: String,
}

impl Snapshot {
    /// The placeholder before the first count.
    pub fn empty() -> Self {
        Self {
            seq: 0,
            taken: Instant::now(),
            taken_at: Utc::now(),
            took: Duration::ZERO,
            error: None,
            totals: BTreeMap::new(),
            topics: BTreeMap::new(),
            topics_left_out: 0,
            relays_left_out: 0,
            oldest_pending: None,
            sent_estimate: 0,
            throughput: Vec::new(),
            relays: Vec::new(),
            breaker: None,
            dead: Vec::new(),
            replays: Vec::new(),
            event: String::new(),
        }
    }

    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }

    pub fn total(&self, status: &str) -> i64 {
        self.totals.get(status).copied().unwrap_or(0)
    }
}

/// The numbers of one count.
struct Counts {
    hot: Vec<HotCount>,
    oldest: Option<Duration>,
    sent_inserted: Option<i64>,
    sent_estimate: i64,
    registered: Vec<RegisteredRelay>,
    dead: Vec<DeadSummary>,
    replays: Vec<RecentReplay>,
}

/// One statement after the other on one pooled connection at a time:
/// inside a relay the page must not take the pipelines' connections.
async fn count(ui: &Ui) -> outbox_relay::Result<Counts> {
    let admin = &ui.inner.admin;
    let hot = admin.hot_counts().await?;
    let oldest = admin.oldest_claimable_age(None).await?;
    let sent = admin.sent_counters().await?;
    let registered = admin.relays().await?;
    let dead = ui.inner.dead.newest(None, None, LIVE_DEAD).await?;
    let replays = admin.recent_replays(REPLAYS).await?;
    Ok(Counts {
        hot,
        oldest,
        sent_inserted: sent.inserted,
        sent_estimate: sent.estimate,
        registered,
        dead,
        replays,
    })
}

/// Computes snapshots until `shutdown`: while nobody watches it waits for
/// a viewer; while someone does, one count per interval at most.
/// `render` turns each snapshot into the `/events` message sent with it
/// (the page's markup, which this module does not know).
pub async fn run(
    ui: Ui,
    breaker: Option<BreakerSource>,
    render: fn(&Snapshot) -> String,
    shutdown: CancellationToken,
) {
    let interval = ui.inner.interval;
    let mut seq = 0u64;
    let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
    loop {
        if ui.inner.snapshots.receiver_count() == 0 {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ui.inner.wake.notified() => {}
                // A viewer that left its receiver without ringing is seen
                // here (the count is of receivers, a check costs nothing).
                _ = tokio::time::sleep(interval) => {}
            }
            continue;
        }
        let started = Instant::now();
        // Counted in a task of its own: a panic while reading a row (a value
        // no check foresaw) fails this snapshot, shown as an error, instead
        // of ending this task and with it the server it is joined with.
        let counting = {
            let ui = ui.clone();
            tokio::spawn(async move { tokio::time::timeout(COUNT_TIMEOUT, count(&ui)).await })
        };
        let abort = counting.abort_handle();
        let counted = tokio::select! {
            _ = shutdown.cancelled() => { abort.abort(); return }
            r = counting => r,
        };
        let took = started.elapsed();
        seq += 1;
        let mut snap = Snapshot::empty();
        snap.seq = seq;
        snap.took = took;
        snap.breaker = breaker.as_ref().and_then(|b| b());
        match counted {
            Ok(Ok(Ok(c))) => fill(&mut snap, c, &mut samples, started),
            Ok(Ok(Err(e))) => snap.error = Some(outbox_relay::error_chain(&e)),
            Ok(Err(_)) => snap.error = Some(format!("the count took over {COUNT_TIMEOUT:?}")),
            Err(e) => {
                snap.error = Some(format!(
                    "the count failed: {}",
                    if e.is_panic() {
                        "it panicked (see the log)"
                    } else {
                        "cancelled"
                    }
                ))
            }
        }
        if let Some(e) = &snap.error {
            tracing::warn!(error = %e, "operator page: cannot count");
        }
        snap.event = render(&snap);
        ui.inner.snapshots.send_replace(Arc::new(snap));
        let pause = interval.saturating_sub(took).max(took * (DUTY - 1));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

fn fill(snap: &mut Snapshot, c: Counts, samples: &mut VecDeque<(Instant, i64)>, at: Instant) {
    let mut relays: BTreeMap<String, RelaySeen> = BTreeMap::new();
    let mut topics: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for h in &c.hot {
        *snap.totals.entry(h.status.clone()).or_default() += h.count;
        *topics
            .entry(cut(&h.topic, SHOWN_TEXT).into_owned())
            .or_default()
            .entry(h.status.clone())
            .or_default() += h.count;
        if let Some(r) = &h.relay {
            let id = cut(r, SHOWN_TEXT).into_owned();
            let seen = relays.entry(id.clone()).or_insert_with(|| RelaySeen {
                id,
                ..RelaySeen::default()
            });
            seen.in_flight += h.count;
            seen.last_claim = seen.last_claim.max(h.last_claim);
        }
    }
    for r in c.registered {
        let id = cut(&r.relay_id, SHOWN_TEXT).into_owned();
        let seen = relays.entry(id.clone()).or_insert_with(|| RelaySeen {
            id,
            ..RelaySeen::default()
        });
        seen.ordering = Some(cut(&r.ordering, SHOWN_TEXT).into_owned());
        seen.lease_until = Some(r.lease_until);
    }
    // The page lists the topics with the most rows, in name order: an
    // application with an id in its topic names must not make the page
    // (sent to every viewer, every interval) as large as the table.
    if topics.len() > MAX_TOPICS {
        let mut by_rows: Vec<_> = topics.into_iter().collect();
        by_rows.sort_by_key(|(_, counts)| std::cmp::Reverse(counts.values().sum::<i64>()));
        snap.topics_left_out = by_rows.len() - MAX_TOPICS;
        by_rows.truncate(MAX_TOPICS);
        topics = by_rows.into_iter().collect();
    }
    snap.topics = topics;
    snap.relays_left_out = relays.len().saturating_sub(MAX_RELAYS);
    snap.relays = relays.into_values().take(MAX_RELAYS).collect();
    snap.oldest_pending = c.oldest;
    snap.sent_estimate = c.sent_estimate;
    if let Some(n) = c.sent_inserted {
        samples.push_back((at, n));
        while samples.len() > SAMPLES + 1 {
            samples.pop_front();
        }
    }
    // The counter only grows; a drop is a statistics reset, not negative
    // throughput.
    snap.throughput = samples
        .iter()
        .zip(samples.iter().skip(1))
        .map(|((t0, n0), (t1, n1))| {
            let secs = t1.duration_since(*t0).as_secs_f64().max(0.001);
            (n1 - n0).max(0) as f64 / secs
        })
        .collect();
    snap.dead = c.dead;
    snap.replays = c.replays;
}
