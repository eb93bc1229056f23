//! The relay: claim a batch (leased), publish it outside any transaction,
//! settle it in one statement. No SQL here: the statements are the
//! store's (`crate::store`, private to this crate).
//!
//! - `config.rs`: every knob, its default and its validation.
//! - `publish.rs`: publishing a batch under its lease, within the deadline.
//! - `settle.rs`: settling a batch in one statement, per aggregate chain;
//!   `settle_plan.rs` decides each row's fate without the database (its
//!   tests: `settle_plan/tests.rs`).
//! - `order.rs`, `ordered.rs`: order per aggregate (gates, buckets, claims).
//! - `run.rs`: the long-running loop — pipelines, wake-ups, breaker.
//! - `lane.rs`, `lane_loop.rs`: the hot path of the insert-only engine: a
//!   lane's pass, and the task per lane that runs it.
//! - `maintain.rs`: the maintenance services beside the pipelines, each
//!   with its own config: `reaper.rs` (the lease reaper), `heartbeat.rs`
//!   (bucket leases), the archiver and the backlog gauges.
//! - `breaker.rs`: the circuit breaker, half-open: one probe at a time.
//! - `cursor.rs`: where claims start reading (its tests: `cursor/tests.rs`).
//! - `tests.rs`: races forced through test hooks.

mod breaker;
pub use breaker::BreakerView;
pub(crate) mod config;
mod cursor;
mod heartbeat;
mod lane;
mod lane_loop;
mod maintain;
mod order;
mod ordered;
mod publish;
pub(crate) mod read_only;
mod reaper;
mod run;
mod settle;
mod settle_plan;
#[cfg(test)]
mod tests;

pub use config::{
    default_relay_id, Ordering, RelayConfig, BATCH_SIZE_RANGE, CONCURRENCY_RANGE,
    DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_MESSAGE_BYTES, MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY,
    MIN_DB_TIMEOUT, MIN_DB_TIMEOUT_WHY, MIN_LEASE, MIN_LEASE_WHY, MIN_PUBLISH_TIMEOUT,
    MIN_PUBLISH_TIMEOUT_WHY,
};
pub use cursor::{ClaimCursor, ClaimSnapshot};

use crate::clock::{Clock, SystemClock};
use crate::publisher::Publisher;
use crate::store::{ClaimParams, Lease, SettleParams, Store};
use crate::{Message, Outcome, Result};
use breaker::Breaker;
use futures_util::FutureExt;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use ordered::OrderCtl;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// What one pass did; printed by `outbox relay --once`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows the publisher accepted.
    pub published: usize,
    /// Rows settled as sent.
    pub marked_sent: u64,
    /// Rows settled as failed (to retry) or dead.
    pub failed: u64,
    /// Of `failed`, how many went to dead.
    pub dead: u64,
    /// Rows handed back to pending without spending an attempt (destination
    /// down, or shutting down).
    pub released: u64,
    /// With ordering on, the aggregates the claim brought (0 with it off).
    pub aggregates: usize,
    /// With ordering on, rows the claim brought that another chain of their
    /// aggregate had to go before (released, counted in `released`).
    pub held_back: usize,
    /// The next claim should follow at once: this one took nothing but
    /// read a span of rows held back (an aggregate in flight or waiting)
    /// that the next claim reads past, so more may be claimable beyond it;
    /// or the next claim looks back from the floor, where rows committed
    /// late in spans the pass went past may wait.
    pub read_on: bool,
}

impl std::fmt::Display for PassStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "claimed={} published={} marked_sent={} failed={}",
            self.claimed, self.published, self.marked_sent, self.failed
        )?;
        if self.released > 0 {
            write!(f, " released={}", self.released)?;
        }
        Ok(())
    }
}

/// A batch that was claimed and handed to the publisher but not yet
/// settled: the crash window lives between this and [`Relay::settle`].
#[derive(Debug, Default)]
pub struct PublishedBatch {
    lease: Option<Lease>,
    messages: Vec<Message>,
    /// `None` when publishing was abandoned (shutdown): release everything.
    outcomes: Option<Vec<Outcome>>,
    /// Rows the claim could not load (over the max message size, or a value
    /// this build cannot read), already settled dead (never published).
    unloadable: Vec<i64>,
    /// Rows the claim could not load that could not be settled dead
    /// (database error): they fail, to be retried, with this reason.
    not_dead_lettered: Vec<(i64, String)>,
    /// Rows claimed but held back, never published: an earlier message of
    /// their aggregate is in flight or waiting. Released, no attempt spent.
    held_back: Vec<i64>,
    /// With ordering on, the aggregate key of every row claimed.
    keys: HashMap<i64, i64>,
    /// See [`PassStats::read_on`].
    read_on: bool,
    /// Rows the publisher reported accepted while the rest of the batch
    /// was in flight, already marked sent.
    early: publish::EarlySent,
}

impl PublishedBatch {
    /// Rows claimed.
    pub fn claimed(&self) -> usize {
        self.messages.len()
            + self.unloadable.len()
            + self.not_dead_lettered.len()
            + self.held_back.len()
    }

    /// Rows the publisher accepted.
    pub fn published(&self) -> usize {
        match &self.outcomes {
            Some(o) => self
                .messages
                .iter()
                .zip(o)
                .filter(|(m, o)| o.is_ok() || self.early.ids.contains(&m.id))
                .count(),
            None => self.early.ids.len(),
        }
    }
}

/// The relay engine over one outbox schema and one publisher.
pub struct Relay<P> {
    store: Store,
    publisher: P,
    config: RelayConfig,
    clock: Arc<dyn Clock>,
    breaker: Breaker,
    limiter: Option<DefaultDirectRateLimiter>,
    listen: Option<crate::connect::Target>,
    /// Where claims start reading; shared by the pipelines.
    cursor: Mutex<ClaimCursor>,
    /// Per-aggregate order: registration, buckets, gates.
    order: OrderCtl,
    /// Warns once while the database refuses writes.
    read_only: read_only::ReadOnly,
    #[cfg(test)]
    hooks: tests::Hooks,
}

crate::debug::debug_showing!(Relay<P> { store, config, .. });

impl<P: Publisher> Relay<P> {
    /// A relay; fails if the configuration is invalid.
    pub fn new(store: Store, publisher: P, config: RelayConfig) -> Result<Self> {
        config.validate()?;
        let limiter = config.rate_limit.and_then(NonZeroU32::new).map(|rate| {
            // A burst as large as one claim, so a full batch can go out at
            // once and the average still holds.
            let burst = NonZeroU32::new(rate.get().min(config.batch_size as u32)).unwrap_or(rate);
            RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
        });
        Ok(Self {
            breaker: Breaker::new(config.breaker_max_backoff),
            store: store.with_deadline(config.db_timeout),
            publisher,
            clock: Arc::new(SystemClock),
            limiter,
            listen: None,
            cursor: Mutex::new(ClaimCursor::new(config.sweep_interval)),
            order: OrderCtl::new(),
            read_only: read_only::ReadOnly::default(),
            config,
            #[cfg(test)]
            hooks: tests::Hooks::default(),
        })
    }

    /// Replaces the clock used for retry scheduling.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Where to LISTEN for producers' notifications (the outbox database).
    /// Without it, or with `notify` off, [`Relay::run`] polls.
    pub fn with_listener(mut self, target: crate::connect::Target) -> Self {
        self.listen = Some(target);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The claim cursor (never held across an await).
    fn cursor(&self) -> std::sync::MutexGuard<'_, ClaimCursor> {
        // Bookkeeping only: a panic elsewhere leaves it usable.
        self.cursor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the circuit breaker is open (destination unreachable).
    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// A handle on [`Relay::breaker_open`] that outlives a borrow of the
    /// relay (for a server task that shows it).
    pub fn breaker_view(&self) -> BreakerView {
        self.breaker.view()
    }

    /// One pass: claim a batch, publish it, settle it. Over a schema with
    /// lanes (the draft migration 12), first a batch of each lane this
    /// relay owns (after a beat, which registers it and hands it lanes),
    /// then a claim on `retries`; the counts are added up.
    pub async fn run_once(&self) -> Result<PassStats> {
        let lanes = match self.store.has_lanes().await? {
            true => self.lanes_once().await?,
            false => PassStats::default(),
        };
        let batch = self.claim_and_publish().await?;
        let claimed = self.settle(batch).await?;
        Ok(lane::add(lanes, claimed))
    }

    /// Claims a batch and publishes it, without settling.
    pub async fn claim_and_publish(&self) -> Result<PublishedBatch> {
        self.claim_and_publish_until(&CancellationToken::new())
            .await
    }

    /// As [`Self::claim_and_publish`], abandoning the publication (the batch
    /// will be released) if `abandon` fires first.
    pub(crate) async fn claim_and_publish_until(
        &self,
        abandon: &CancellationToken,
    ) -> Result<PublishedBatch> {
        let params = ClaimParams {
            limit: self.batch_limit() as i64,
            relay_id: &self.config.relay_id,
            from_id: cursor::FROM_ALL,
            max_batch_bytes: self.config.max_batch_bytes as i64,
            max_message_bytes: self.config.max_message_bytes as i64,
            ordered: None,
        };
        // With ordering on, claims are admitted against the gates, the
        // buckets up to date (see `claim_in_order`).
        let (claimed, held_back, from_floor) = match self.config.ordering {
            Ordering::None => {
                let started = self.clock.now();
                let from_id = self.cursor().next_from(started);
                let claimed = self
                    .store
                    .claim_rows(ClaimParams { from_id, ..params })
                    .await?;
                let from_floor = self.note_claim(from_id, &claimed, started);
                (claimed.decode(), Vec::new(), from_floor)
            }
            Ordering::Aggregate => self.claim_in_order(&self.order, params).await?,
        };
        let Some(mut lease) = claimed.lease else {
            return Ok(PublishedBatch {
                outcomes: Some(Vec::new()),
                read_on: claimed.scanned_upto.is_some() || from_floor,
                ..PublishedBatch::default()
            });
        };
        let held: HashSet<i64> = held_back.iter().copied().collect();
        let unloadable: Vec<(i64, String)> = claimed
            .unloadable
            .into_iter()
            .filter(|(id, _)| !held.contains(id))
            .collect();
        let (unloadable, not_dead_lettered) =
            match self.dead_letter_unloadable(&lease, &unloadable).await {
                Ok(()) => (unloadable.iter().map(|t| t.0).collect(), Vec::new()),
                Err(why) => (
                    Vec::new(),
                    unloadable.into_iter().map(|t| (t.0, why.clone())).collect(),
                ),
            };
        let messages: Vec<Message> = claimed
            .messages
            .into_iter()
            .filter(|m| !held.contains(&m.id))
            .collect();
        let refused = claimed.refused;
        let mut early = publish::EarlySent::default();
        let outcomes = if messages.is_empty() {
            Some(Vec::new())
        } else {
            crate::metrics::claimed(messages.len());
            self.publish_keeping_lease(
                &messages,
                &refused,
                &mut lease,
                abandon,
                &claimed.keys,
                &mut early,
            )
            .await
        };
        Ok(PublishedBatch {
            lease: Some(lease),
            messages,
            outcomes,
            unloadable,
            not_dead_lettered,
            held_back,
            keys: claimed.keys,
            read_on: from_floor,
            early,
        })
    }

    /// How many rows a batch takes at most: the batch size, or the rate
    /// limit when lower (the limiter's burst is one batch).
    fn batch_limit(&self) -> usize {
        match &self.limiter {
            Some(_) => self
                .config
                .batch_size
                .min(self.config.rate_limit.unwrap_or(u32::MAX) as usize),
            None => self.config.batch_size,
        }
    }

    /// Moves the cursor past a claim that read from `from_id`, started at
    /// `started`. True when the next claim should follow at once, looking
    /// back from the floor (see [`ClaimCursor::claimed`]).
    fn note_claim(
        &self,
        from_id: i64,
        claimed: &crate::store::RawClaim,
        started: chrono::DateTime<chrono::Utc>,
    ) -> bool {
        let found = claimed.id_range();
        let read_upto = found.map(|(_, max)| max).max(claimed.scanned_upto);
        match (read_upto, claimed.snapshot) {
            (Some(read_upto), Some(snapshot)) => {
                let now = self.clock.now();
                self.cursor()
                    .claimed(from_id, found, read_upto, snapshot, started, now)
            }
            _ => {
                self.cursor().pass_ended();
                false
            }
        }
    }

    /// Settles dead, before anything is published, the rows the claim could
    /// not load, with the claim's reason: over the max message size (left
    /// in the database), or holding a value this build cannot read. No
    /// retry changes either. On a database error they are failed with the
    /// rest of the batch instead (and, with ordering on, hold their
    /// aggregate back).
    async fn dead_letter_unloadable(
        &self,
        lease: &Lease,
        rows: &[(i64, String)],
    ) -> std::result::Result<(), String> {
        if rows.is_empty() {
            return Ok(());
        }
        let p = SettleParams {
            dead: rows.to_vec(),
            ..SettleParams::default()
        };
        match self.store.settle_messages(lease, &p).await {
            Ok(settled) => {
                crate::metrics::settled(0, settled.dead, 0);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "could not dead-letter unloadable messages");
                Err(format!(
                    "could not dead-letter a message the claim could not load: {}",
                    crate::error_chain(&e)
                ))
            }
        }
    }

    /// Asks the destination whether it is reachable, within the publish
    /// deadline, a panic counting as unreachable.
    async fn check(&self) -> std::result::Result<(), String> {
        let check = AssertUnwindSafe(async { self.publisher.check().await });
        match tokio::time::timeout(self.config.publish_timeout, check.catch_unwind()).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.message),
            Ok(Err(panic)) => Err(format!(
                "check panicked: {}",
                publish::panic_message(&*panic)
            )),
            Err(_) => Err(format!(
                "check timed out after {:?}",
                self.config.publish_timeout
            )),
        }
    }

    /// Whether the destination is down (`Some(why)`), asked by one caller
    /// at a time: while one check is in flight the others wait for its
    /// result instead of piling onto a struggling destination.
    async fn destination_down(&self) -> Option<String> {
        if self.breaker.is_open() {
            return Some(self.breaker.reason());
        }
        match self.breaker.probe_or_wait().await {
            Some(_turn) => match self.check().await {
                Ok(()) => None,
                Err(why) => {
                    self.breaker.trip(self.publisher.name(), &why);
                    Some(why)
                }
            },
            // The check that just ended left its verdict in the breaker.
            None => self.breaker.is_open().then(|| self.breaker.reason()),
        }
    }

    /// Probes a destination the breaker holds open, closing it on success;
    /// if another pipeline is probing, waits for its result instead.
    async fn probe(&self) {
        if let Some(_turn) = self.breaker.probe_or_wait().await {
            let ok = self.check().await.is_ok();
            self.breaker.probed(self.publisher.name(), ok);
        }
    }
}
