//! The relay's side of per-aggregate order: its registration and bucket
//! leases, claims serialized and admitted against the gates, and the checks
//! that keep the gates true (see `order.rs` for the rules).

use super::config::MAX_RETRY_PAUSE;
use super::order::Gates;
use super::Relay;
use crate::publisher::Publisher;
use crate::store::{BucketSet, ClaimParams, Claimed, OrderFilter, BUCKETS};
use crate::Result;
use std::sync::atomic::{AtomicU8, Ordering as AtomicOrdering};
use std::time::Instant;

/// Per-aggregate order state of one relay.
#[derive(Debug)]
pub(crate) struct OrderCtl {
    /// Random per process: a restart under the same relay id is a new
    /// incarnation.
    token: i64,
    /// Held from a claim statement until its chains are admitted, and by
    /// the heartbeat while the buckets owned change: one at a time.
    turn: tokio::sync::Mutex<Turn>,
    gates: std::sync::Mutex<Gates>,
    /// The lanes of the hot path this relay owns (bit `l`: lane `l`), as
    /// the last beat left them: the owner of lane `l` owns bucket `l`.
    lanes: AtomicU8,
}

/// What only the holder of the claim turn touches.
#[derive(Debug, Default)]
struct Turn {
    /// Buckets owned whose held-back aggregates are loaded into the gates:
    /// the claim filter's bucket map.
    owned: BucketSet,
    last_beat: Option<Instant>,
    last_check: Option<Instant>,
    /// Relays seen with the other mode, as last warned about.
    other_modes: i64,
}

impl OrderCtl {
    pub fn new() -> Self {
        Self {
            token: rand::random::<i64>(),
            turn: Default::default(),
            gates: Default::default(),
            lanes: AtomicU8::new(0),
        }
    }

    /// The registration token (random per process).
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Whether this relay owns `lane` of the hot path.
    pub fn owns_lane(&self, lane: i32) -> bool {
        (0..8).contains(&lane) && self.lanes.load(AtomicOrdering::Relaxed) & (1 << lane) != 0
    }

    /// The lowest lane this relay owns, if any.
    pub fn first_lane(&self) -> Option<i32> {
        let lanes = self.lanes.load(AtomicOrdering::Relaxed);
        (lanes != 0).then(|| lanes.trailing_zeros() as i32)
    }

    /// Records the buckets owned: the lanes are those whose first bucket is.
    fn set_owned(&self, turn: &mut Turn, owned: BucketSet) {
        let lanes = (0..super::lane::LANES)
            .filter(|&l| owned.contains(l as usize))
            .fold(0u8, |m, l| m | (1 << l));
        self.lanes.store(lanes, AtomicOrdering::Relaxed);
        turn.owned = owned;
    }

    /// The gates (never held across an await).
    pub fn gates(&self) -> std::sync::MutexGuard<'_, Gates> {
        // Bookkeeping only: a panic elsewhere leaves it usable.
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<P: Publisher> Relay<P> {
    /// Claims under the claim turn, then admits the rows against the gates:
    /// returns the claim, the ids that must not be published now
    /// (`params.from_id` is ignored), and whether the next claim should
    /// follow at once, looking back from the floor (see `note_claim`).
    ///
    /// The cursor is read and moved only under the turn, after the
    /// heartbeat: a relay that has just taken buckets over must sweep from
    /// the first id before any other claim, since its floor passed over
    /// their rows while they were another relay's, and the claim after the
    /// sweep must read from where the sweep brought the floor down to. A
    /// claim from the old floor would take message k+1 of an aggregate whose
    /// message k (pending, or failed and due, so not loaded into the gates)
    /// sits below it.
    pub(super) async fn claim_in_order(
        &self,
        ctl: &OrderCtl,
        params: ClaimParams<'_>,
    ) -> Result<(Claimed, Vec<i64>, bool)> {
        let mut turn = ctl.turn.lock().await;
        self.maintain_order(ctl, &mut turn).await?;
        if turn.owned.is_empty() {
            return Ok((Claimed::default(), Vec::new(), false));
        }
        // Gates that open from here on reject this claim's rows of their
        // aggregate: marked before the start is read, so an open that
        // brings the floor back after this read is always seen.
        ctl.gates().claiming();
        let started = self.clock.now();
        let from_id = self.cursor().next_from(started);
        let params = ClaimParams { from_id, ..params };
        let held = ctl.gates().held();
        let owned = (turn.owned.len() < BUCKETS).then_some(&turn.owned);
        let claimed = self
            .store
            .claim_rows(ClaimParams {
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
                // The claim may have committed with its answer lost: rows of
                // ours in flight that the gates do not know. Reload every
                // bucket before the next claim.
                ctl.set_owned(&mut turn, BucketSet::default());
                turn.last_beat = None;
                return Err(e);
            }
        };
        let mut rows: Vec<(i64, i64)> = claimed.keys.iter().map(|(id, k)| (*id, *k)).collect();
        rows.sort_unstable();
        let admitted = ctl.gates().admit(&rows);
        let from_floor = self.note_claim(from_id, &claimed, started);
        // The payloads are parsed once the next claim may start.
        drop(turn);
        Ok((claimed.decode(), admitted.rejected, from_floor))
    }

    /// The heartbeat when due (`heartbeat.rs`: a third of the bucket lease): renews the
    /// registration, takes or gives back buckets, and loads what the
    /// buckets taken over hold back; then, every sweep interval, checks
    /// that the heads the gates wait for are still live.
    async fn maintain_order(&self, ctl: &OrderCtl, turn: &mut Turn) -> Result<()> {
        // A relay with no bucket yet (just started, or its share went to
        // others while the database was away) asks again within a retry
        // pause rather than a third of the lease: it sends nothing until
        // it owns some.
        let heartbeat = self.config.heartbeat();
        let every = match turn.owned.is_empty() {
            true => MAX_RETRY_PAUSE.min(heartbeat.interval),
            false => heartbeat.interval,
        };
        if turn.last_beat.map_or(true, |at| at.elapsed() >= every) {
            let beat = self
                .store
                .relay_heartbeat(
                    &self.config.relay_id,
                    ctl.token,
                    self.config.ordering.as_str(),
                    heartbeat.bucket_lease,
                )
                .await?;
            if !beat.renewed {
                // Registered anew: whatever this relay knew of its buckets
                // may have changed under another owner.
                ctl.set_owned(turn, BucketSet::default());
                ctl.gates().forget(|_| false);
            }
            let lost = turn.owned.minus(&beat.owned);
            if !lost.is_empty() {
                ctl.gates().forget(|k| !lost.contains(BucketSet::of(k)));
                let kept = turn.owned.minus(&lost);
                ctl.set_owned(turn, kept);
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
                tracing::info!(
                    buckets = load.len(),
                    owned = beat.owned.len(),
                    held_back = held.len(),
                    "took buckets of aggregates"
                );
            }
            ctl.set_owned(turn, beat.owned);
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
                let asked: Vec<(i64, i64)> = heads.iter().map(|h| (h.key, h.was)).collect();
                let found: std::collections::HashMap<(i64, i64), Option<i64>> = self
                    .store
                    .next_live(&asked)
                    .await?
                    .into_iter()
                    .map(|(key, was, lowest)| ((key, was), lowest))
                    .collect();
                let now = self.clock.now();
                for head in heads {
                    let Some(&lowest) = found.get(&(head.key, head.was)) else {
                        continue;
                    };
                    if let Some(id) = ctl.gates().moved(head, lowest) {
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
        let mut turn = self.order.turn.lock().await;
        self.maintain_order(&self.order, &mut turn).await
    }

    /// Leaves: the registration is removed and the buckets freed for the
    /// other relays at once. [`Relay::run`] does it as it returns; call it
    /// after the last [`Relay::run_once`] (or the buckets pass to the other
    /// relays only when this one's bucket lease ends). Run it after every
    /// claim has been settled.
    pub async fn leave(&self) {
        let turn = self.order.turn.lock().await;
        if turn.last_beat.is_none() {
            return;
        }
        if let Err(e) = self
            .store
            .relay_leave(&self.config.relay_id, self.order.token)
            .await
        {
            tracing::warn!(error = %crate::error_chain(&e), "could not free this relay's buckets; they pass to the other relays when its lease ends");
        }
    }
}
