//! Settling a published batch: one statement for the whole batch, each
//! aggregate's messages a chain (after the first one not sent, the rest
//! are released), the gates narrowed before the statement and opened after.
//! What becomes of each row is decided in `settle_plan.rs`; this applies it.

use super::config::{MAX_RETRY_PAUSE, SETTLE_RETRY_FOR};
use super::settle_plan::{self, SettlePlan};
use super::{PassStats, PublishedBatch, Relay};
use crate::publisher::Publisher;
use crate::retry::saturating_add_std;
use crate::store::{Lease, SettleParams, Settled};
use crate::Result;
use std::time::Duration;

impl<P: Publisher> Relay<P> {
    /// Settles a published batch in one statement: sent, failed with the
    /// next retry time, dead (permanent error or retries used up), or
    /// released when the destination turns out to be down (see
    /// [`SettlePlan::new`] for each row's fate, and the chains of an
    /// aggregate with ordering on).
    pub async fn settle(&self, mut batch: PublishedBatch) -> Result<PassStats> {
        let Some(lease) = batch.lease.take() else {
            return Ok(settle_plan::pass_stats(&batch));
        };
        let plan = self.plan_settle(batch).await;
        // Narrow before the statement: a claim running meanwhile must not
        // take what comes after a message left live.
        {
            let mut gates = self.order.gates();
            for &(k, id, waiting) in &plan.hold {
                gates.hold(k, id, waiting);
            }
        }
        let settled = self
            .apply(&lease, &plan.params, plan.stats)
            .await
            .map(|(mut stats, all)| {
                stats.marked_sent += plan.early_sent;
                (stats, all && !plan.early_lost)
            });
        // Open only after it committed. A claim running meanwhile may have
        // read where to start before the open brought the floor back to
        // rows the filter had passed over: `Gates::open` marks the
        // aggregate, and that claim's rows of it are rejected (`opened`).
        // On doubt (an error, rows whose lease was lost), hold every chain
        // at its start: the periodic check of heads sets the gates right.
        let mut gates = self.order.gates();
        let now = self.clock.now();
        match &settled {
            Ok((_, true)) => {
                for &(k, last) in &plan.open {
                    if let Some(back) = gates.open(k, last) {
                        self.cursor().released(back, now);
                    }
                }
            }
            _ => {
                for &(k, id) in &plan.hold_on_doubt {
                    gates.hold(k, id, true);
                }
            }
        }
        settled.map(|(stats, _)| stats)
    }

    /// What becomes of each row of a published batch ([`SettlePlan::new`]).
    /// Retryable failures may mean the destination is down rather than the
    /// messages being at fault: it is asked, and if it is down the rows go
    /// back without spending their attempts and the breaker opens.
    pub(super) async fn plan_settle(&self, batch: PublishedBatch) -> SettlePlan {
        let unreachable = match settle_plan::asks_destination(&batch) {
            true => self.destination_down().await,
            false => None,
        };
        let plan = SettlePlan::new(
            batch,
            &self.config.retry,
            self.clock.now(),
            unreachable,
            &mut rand::thread_rng(),
        );
        crate::metrics::order_breaks(plan.order_breaks);
        plan
    }

    /// Runs the settle statement; returns the stats and whether every row
    /// was settled (none had lost its lease).
    async fn apply(
        &self,
        lease: &Lease,
        p: &SettleParams,
        mut stats: PassStats,
    ) -> Result<(PassStats, bool)> {
        let expected = (p.sent.len() + p.failed.len() + p.dead.len() + p.released.len()) as u64;
        if expected == 0 {
            return Ok((stats, true));
        }
        #[cfg(test)]
        self.hooks.before_settle.pass().await;
        let settled = self.settle_retrying(lease, p).await;
        {
            // Rows going back to the queue sit below the claim floor: bring
            // it back to them only now that the settle has ended. Earlier,
            // a sibling's claim could read past them while still
            // `processing` and move the floor over them after the rewind,
            // hiding them until the next sweep. Even after an error: the
            // statement may have committed, and a rewind costs nothing.
            let mut cursor = self.cursor();
            p.failed
                .iter()
                .for_each(|(id, _, at)| cursor.failed(*id, *at));
            let now = self.clock.now();
            p.released.iter().for_each(|id| cursor.released(*id, now));
        }
        let Settled {
            sent,
            failed,
            dead,
            released,
        } = settled?;
        crate::metrics::settled(failed, dead, released);
        let settled = sent + failed + dead + released;
        if settled < expected {
            tracing::warn!(
                lost = expected - settled,
                "lease lost before settling; another relay owns those rows now"
            );
        }
        stats.marked_sent = sent;
        stats.failed += failed + dead;
        stats.dead += dead;
        stats.released = released;
        Ok((stats, settled == expected))
    }

    /// The settle statement, tried again after a database error (a
    /// partition, a restart, a deadline passed) for up to
    /// [`SETTLE_RETRY_FOR`] while the lease lasts: the batch is published,
    /// and settling it later beats publishing it again after the lease. The
    /// statement is guarded by the lease, so a try that committed but whose
    /// answer was lost settles nothing the second time (counted as lost).
    async fn settle_retrying(&self, lease: &Lease, p: &SettleParams) -> Result<Settled> {
        let lease_ends = saturating_add_std(lease.locked_at, self.config.lease);
        let give_up = tokio::time::Instant::now() + SETTLE_RETRY_FOR;
        let mut pause = Duration::from_millis(100);
        loop {
            match self.store.settle_messages(lease, p).await {
                Err(e) if e.is_transient() => {
                    let now = tokio::time::Instant::now();
                    let lease_left = (lease_ends - self.clock.now()).to_std().unwrap_or_default();
                    if now + pause >= give_up || pause >= lease_left {
                        return Err(e);
                    }
                    tracing::debug!(error = %crate::error_chain(&e), retry_in = ?pause, "settle failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
                other => return other,
            }
        }
    }
}
