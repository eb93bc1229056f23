//! The relay's side of per-aggregate order: its registration and bucket
//! leases, claims admitted against the gates, and the checks that keep the
//! gates true (see `order.rs` for the rules).
//!
//! Pipelines claim at the same time, as with ordering off: two claims may
//! split consecutive messages of one aggregate between them (SKIP LOCKED),
//! so each claim registers its rows with the gates as soon as it returns,
//! and is admitted only once every claim that started before it returned
//! has registered its own. Whatever lower message of its aggregates it
//! skipped is then known. Changing the buckets owned, and the first claim
//! after taking buckets over, run alone.

use super::order::Gates;
use super::Relay;
use crate::publisher::Publisher;
use crate::store::{BucketSet, ClaimParams, Claimed, OrderFilter, BUCKETS};
use crate::Result;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Instant;

/// Per-aggregate order state of one relay.
#[derive(Debug)]
pub(crate) struct OrderCtl {
    /// Random per process: a restart under the same relay id is a new
    /// incarnation.
    token: i64,
    /// Claims hold it shared; the heartbeat (which changes the buckets
    /// owned and what the gates know of them), the check of heads and the
    /// first claim after a takeover hold it alone.
    turn: tokio::sync::RwLock<Turn>,
    gates: std::sync::Mutex<Gates>,
    claims: std::sync::Mutex<Claims>,
    /// A claim returned (or gave up): claims waiting to be admitted look
    /// again.
    returned: tokio::sync::Notify,
    /// A claim failed and may have committed with its answer lost: rows of
    /// ours in flight that the gates do not know. Every bucket is reloaded
    /// before the next claim, and claims waiting to be admitted are
    /// released whole.
    answer_lost: AtomicBool,
}

/// What the claim turn guards: read by every claim, changed alone.
#[derive(Debug, Default)]
struct Turn {
    /// Buckets owned whose held-back aggregates are loaded into the gates:
    /// the claim filter's bucket map.
    owned: BucketSet,
    last_beat: Option<Instant>,
    last_check: Option<Instant>,
    /// Relays seen with the other mode, as last warned about.
    other_modes: i64,
    /// Buckets were taken over: the next claim sweeps from the first id,
    /// alone (see [`Relay::claim_in_order`]).
    sweep_alone: bool,
}

/// Claims issued and not yet admitted, by number.
#[derive(Debug, Default)]
struct Claims {
    next: u64,
    /// The gates' open count when issued, and whether its rows are
    /// registered (or it failed).
    live: BTreeMap<u64, (u64, bool)>,
}

/// One claim from issue to admission; dropping it (an error, a cancelled
/// pipeline) unblocks the claims waiting for it.
struct Ticket<'a> {
    ctl: &'a OrderCtl,
    seq: u64,
    since: u64,
}

impl Ticket<'_> {
    /// The claim's rows are registered: returns the claims it must wait
    /// for (those issued before now).
    fn returned(&self) -> u64 {
        let mut claims = self.ctl.claims();
        if let Some(c) = claims.live.get_mut(&self.seq) {
            c.1 = true;
        }
        let upto = claims.next;
        drop(claims);
        self.ctl.returned.notify_waiters();
        upto
    }

    /// Until every claim issued before `upto` has registered its rows.
    async fn wait_for_earlier(&self, upto: u64) {
        loop {
            let notified = self.ctl.returned.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .ctl
                .claims()
                .live
                .range(..upto)
                .all(|(_, (_, registered))| *registered)
            {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut claims = self.ctl.claims();
        claims.live.remove(&self.seq);
        let oldest = claims.live.values().map(|c| c.0).min();
        drop(claims);
        // Opens before every claim still to be admitted concern none.
        self.ctl
            .gates()
            .forget_opens_before(oldest.unwrap_or(u64::MAX));
        self.ctl.returned.notify_waiters();
    }
}

impl OrderCtl {
    pub fn new() -> Self {
        Self {
            token: rand::random::<i64>(),
            turn: Default::default(),
            gates: Default::default(),
            claims: Default::default(),
            returned: Default::default(),
            answer_lost: AtomicBool::new(false),
        }
    }

    /// The gates (never held across an await).
    pub fn gates(&self) -> std::sync::MutexGuard<'_, Gates> {
        // Bookkeeping only: a panic elsewhere leaves it usable.
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, Claims> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers a claim about to be issued.
    fn issue(&self) -> Ticket<'_> {
        // Under the claims lock, so that the open count and the number
        // agree for every claim.
        let mut claims = self.claims();
        let since = self.gates().claiming();
        let seq = claims.next;
        claims.next += 1;
        claims.live.insert(seq, (since, false));
        Ticket {
            ctl: self,
            seq,
            since,
        }
    }
}

impl<P: Publisher> Relay<P> {
    /// Claims, then admits the rows against the gates: returns the claim
    /// and the ids that must not be published now (`params.from_id` is
    /// ignored).
    ///
    /// After taking buckets over, the relay must sweep from the first id
    /// before any other claim, since its floor passed over their rows while
    /// they were another relay's, and the claims after the sweep must read
    /// from where the sweep brought the floor down to. A claim from the old
    /// floor would take message k+1 of an aggregate whose message k
    /// (pending, or failed and due, so not loaded into the gates) sits
    /// below it. So that claim runs alone, as do the heartbeat and the check
    /// of heads when due.
    pub(super) async fn claim_in_order(
        &self,
        ctl: &OrderCtl,
        params: ClaimParams<'_>,
    ) -> Result<(Claimed, Vec<i64>)> {
        if self.order_due(&*ctl.turn.read().await) {
            let mut turn = ctl.turn.write().await;
            self.maintain_order(ctl, &mut turn).await?;
            if std::mem::take(&mut turn.sweep_alone) {
                return self.claim_admitted(ctl, &turn, params).await;
            }
        }
        let turn = ctl.turn.read().await;
        self.claim_admitted(ctl, &turn, params).await
    }

    /// Whether the claim turn must first be taken alone (heartbeat, check of
    /// heads, a lost claim answer, the sweep after a takeover).
    fn order_due(&self, turn: &Turn) -> bool {
        let every = self.config.bucket_lease / 3;
        turn.sweep_alone
            || self.order.answer_lost.load(SeqCst)
            || turn.last_beat.map_or(true, |at| at.elapsed() >= every)
            || turn
                .last_check
                .map_or(true, |at| at.elapsed() >= self.config.sweep_interval)
    }

    async fn claim_admitted(
        &self,
        ctl: &OrderCtl,
        turn: &Turn,
        params: ClaimParams<'_>,
    ) -> Result<(Claimed, Vec<i64>)> {
        if turn.owned.is_empty() {
            return Ok((Claimed::default(), Vec::new()));
        }
        // Gates that open from here on reject this claim's rows of their
        // aggregate: numbered before the start is read, so an open that
        // brings the floor back after this read is always seen.
        let ticket = ctl.issue();
        let started = self.clock.now();
        let from_id = self.cursor().next_from(started);
        let params = ClaimParams { from_id, ..params };
        let held = ctl.gates().held();
        let owned = (turn.owned.len() < BUCKETS).then_some(&turn.owned);
        let claimed = self
            .store
            .claim_messages(ClaimParams {
                ordered: Some(OrderFilter {
                    token: ctl.token,
                    owned,
                    held: &held,
                }),
                ..params
            })
            .await;
        let claimed = match claimed {
            Ok(c) => c,
            Err(e) => {
                ctl.answer_lost.store(true, SeqCst);
                return Err(e);
            }
        };
        let mut rows: Vec<(i64, i64)> = claimed.keys.iter().map(|(id, k)| (*id, *k)).collect();
        rows.sort_unstable();
        ctl.gates().register(&rows);
        let upto = ticket.returned();
        ticket.wait_for_earlier(upto).await;
        let rejected = if ctl.answer_lost.load(SeqCst) {
            // Rows of an earlier claim may be in flight unknown: publish
            // nothing until every bucket is reloaded.
            rows.iter().map(|r| r.0).collect()
        } else {
            ctl.gates().admit_since(&rows, ticket.since).rejected
        };
        drop(ticket);
        self.note_claim(from_id, &claimed, started);
        Ok((claimed, rejected))
    }

    /// The heartbeat when due (a third of the bucket lease): renews the
    /// registration, takes or gives back buckets, and loads what the
    /// buckets taken over hold back; then, every sweep interval, checks
    /// that the heads the gates wait for are still live.
    async fn maintain_order(&self, ctl: &OrderCtl, turn: &mut Turn) -> Result<()> {
        if ctl.answer_lost.swap(false, SeqCst) {
            // Reload every bucket before the next claim.
            turn.owned = BucketSet::default();
            turn.last_beat = None;
        }
        let every = self.config.bucket_lease / 3;
        if turn.last_beat.map_or(true, |at| at.elapsed() >= every) {
            let beat = self
                .store
                .relay_heartbeat(
                    &self.config.relay_id,
                    ctl.token,
                    self.config.ordering.as_str(),
                    self.config.bucket_lease,
                )
                .await?;
            if !beat.renewed {
                // Registered anew: whatever this relay knew of its buckets
                // may have changed under another owner.
                turn.owned = BucketSet::default();
                ctl.gates().forget(|_| false);
            }
            let lost = turn.owned.minus(&beat.owned);
            if !lost.is_empty() {
                ctl.gates().forget(|k| !lost.contains(BucketSet::of(k)));
                turn.owned = turn.owned.minus(&lost);
                tracing::info!(
                    buckets = lost.len(),
                    "gave buckets of aggregates to another relay"
                );
            }
            let load = beat.owned.minus(&turn.owned).union(&beat.gained);
            if !load.is_empty() {
                let held = self.store.held_in_buckets(&load).await?;
                ctl.gates().load(&held);
                // Their rows may sit anywhere below the floor.
                self.cursor().sweep_next();
                turn.sweep_alone = true;
                tracing::info!(
                    buckets = load.len(),
                    owned = beat.owned.len(),
                    held_back = held.len(),
                    "took buckets of aggregates"
                );
            }
            turn.owned = beat.owned;
            turn.last_beat = Some(Instant::now());
            if beat.other_modes != turn.other_modes {
                turn.other_modes = beat.other_modes;
                if beat.other_modes > 0 {
                    tracing::warn!(
                        relays = beat.other_modes,
                        "relays with another ordering mode run on this schema: order per aggregate holds only among the messages this relay publishes"
                    );
                }
            }
        }
        if turn
            .last_check
            .map_or(true, |at| at.elapsed() >= self.config.sweep_interval)
        {
            let heads = ctl.gates().heads();
            if !heads.is_empty() {
                let found = self.store.next_live(&heads).await?;
                let now = self.clock.now();
                for (key, was, lowest) in found {
                    if let Some(id) = ctl.gates().moved(key, was, lowest) {
                        self.cursor().released(id, now);
                    }
                }
            }
            turn.last_check = Some(Instant::now());
        }
        Ok(())
    }

    /// Keeps the registration and buckets alive while pipelines are busy
    /// publishing (claims also beat when due).
    /// With ordering off the relay only registers, so that relays of the
    /// other mode can warn about the mix.
    pub(super) async fn beat(&self) -> Result<()> {
        let mut turn = self.order.turn.write().await;
        self.maintain_order(&self.order, &mut turn).await
    }

    /// Leaves: the registration is removed and the buckets freed for the
    /// other relays at once. [`Relay::run`] does it as it returns; call it
    /// after the last [`Relay::run_once`] (or the buckets pass to the other
    /// relays only when this one's bucket lease ends). Run it after every
    /// claim has been settled.
    pub async fn leave(&self) {
        let turn = self.order.turn.write().await;
        if turn.last_beat.is_none() {
            return;
        }
        if let Err(e) = self
            .store
            .relay_leave(&self.config.relay_id, self.order.token)
            .await
        {
            tracing::warn!(error = %e, "could not free this relay's buckets; they pass to the other relays when its lease ends");
        }
    }
}
