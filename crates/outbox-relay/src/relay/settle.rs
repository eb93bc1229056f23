//! Settling a published batch: one statement for the whole batch, each
//! aggregate's messages a chain (after the first one not sent, the rest
//! are released), the gates narrowed before the statement and opened after.

use super::config::{MAX_RETRY_PAUSE, SETTLE_RETRY_FOR};
use super::{PassStats, PublishedBatch, Relay};
use crate::publisher::Publisher;
use crate::retry::saturating_add_std;
use crate::store::{Lease, SettleParams, Settled};
use crate::{Outcome, PublishError, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

impl<P: Publisher> Relay<P> {
    /// Settles a published batch in one statement: sent, failed with the
    /// next retry time, dead (permanent error or retries used up), or
    /// released when the destination turns out to be down.
    ///
    /// With ordering on, each aggregate's messages in the batch are a
    /// chain: after the first that is not sent, the rest are released (no
    /// attempt spent) and go out after it. A message the destination
    /// accepted anyway (a pipelined publisher) stays sent, counted as an
    /// order break.
    pub async fn settle(&self, batch: PublishedBatch) -> Result<PassStats> {
        let stats = PassStats {
            claimed: batch.claimed(),
            published: batch.published(),
            failed: batch.unloadable.len() as u64,
            dead: batch.unloadable.len() as u64,
            aggregates: batch.keys.values().collect::<HashSet<_>>().len(),
            held_back: batch.held_back.len(),
            read_on: batch.read_on,
            ..PassStats::default()
        };
        let Some(lease) = batch.lease else {
            return Ok(stats);
        };
        let mut p = SettleParams {
            released: batch.held_back,
            release_reason: "held back: an earlier message of its aggregate is not sent yet".into(),
            ..SettleParams::default()
        };
        // Every row of the batch with what became of it, in id order.
        let mut rows: Vec<(i64, i32, Outcome)> = Vec::new();
        let abandoned = batch.outcomes.is_none();
        // Marked sent already, while the rest of the batch was in flight:
        // accepted, whatever the publish said after (it may have missed
        // its deadline on the others).
        let early = &batch.early.ids;
        match batch.outcomes {
            Some(outcomes) => rows.extend(batch.messages.iter().zip(outcomes).map(|(m, o)| {
                let o = if early.contains(&m.id) { Ok(()) } else { o };
                (m.id, m.attempts, o)
            })),
            None => rows.extend(batch.messages.iter().map(|m| {
                let o = if early.contains(&m.id) {
                    Ok(())
                } else {
                    Err(PublishError::retryable("released at shutdown"))
                };
                (m.id, m.attempts, o)
            })),
        }
        rows.extend(
            batch
                .not_dead_lettered
                .into_iter()
                .map(|(id, why)| (id, 0, Err(PublishError::retryable(why)))),
        );
        rows.sort_unstable_by_key(|r| r.0);
        // Retryable failures may mean the destination is down rather than
        // the messages being at fault: ask it. If it is down, hand the rows
        // back without spending their attempts and open the breaker, so an
        // outage never pushes messages into dead.
        let retryable = rows
            .iter()
            .filter(|(_, _, o)| matches!(o, Err(e) if e.is_retryable()))
            .count();
        let destination_down = if abandoned {
            Some("released at shutdown".to_owned())
        } else if retryable > 0 {
            self.destination_down()
                .await
                .map(|why| format!("destination unreachable: {why}"))
        } else {
            None
        };
        let now = self.clock.now();
        let policy = &self.config.retry;
        // A destination's Retry-After is honoured up to the policy's longest
        // step: `Retry-After: 9000000000000` must neither overflow the
        // timestamp (a panic, then a crash loop on the same row) nor park
        // a message for centuries.
        let longest = policy.longest_delay();
        let key = |id: i64| batch.keys.get(&id).copied();
        // Per aggregate: (last id in the batch, ids left live and whether
        // each waits for a retry, not claimable at once).
        let mut chains: BTreeMap<i64, (i64, Vec<(i64, bool)>)> = BTreeMap::new();
        for id in &batch.unloadable {
            if let Some(k) = key(*id) {
                chains.entry(k).or_insert((*id, Vec::new())).0 = *id;
            }
        }
        let mut broken: HashSet<i64> = HashSet::new();
        let mut order_breaks = 0;
        for (id, attempts, outcome) in rows {
            let k = key(id);
            let behind = k.is_some_and(|k| broken.contains(&k));
            // Whether the message stays live: Some(waits for a retry) when
            // failed or released, None when dead.
            let live = match outcome {
                Ok(()) => {
                    if !early.contains(&id) {
                        p.sent.push(id);
                    }
                    order_breaks += u64::from(behind);
                    if let Some(chain) = k.and_then(|k| chains.get_mut(&k)) {
                        chain.0 = chain.0.max(id);
                    } else if let Some(k) = k {
                        chains.insert(k, (id, Vec::new()));
                    }
                    continue;
                }
                Err(e) if behind || (e.is_retryable() && destination_down.is_some()) => {
                    p.released.push(id);
                    Some(false)
                }
                Err(e) if e.is_retryable() && !policy.exhausted(attempts) => {
                    let mut at = policy.next_run_at(attempts, now);
                    if let Some(after) = e.retry_after {
                        at = at.max(saturating_add_std(now, after.min(longest)));
                    }
                    p.failed.push((id, e.message, at));
                    Some(true)
                }
                Err(e) if e.is_retryable() => {
                    let reason = format!(
                        "max attempts ({}) reached: {}",
                        policy.max_attempts, e.message
                    );
                    p.dead.push((id, reason));
                    None
                }
                Err(e) => {
                    p.dead.push((id, format!("permanent: {}", e.message)));
                    None
                }
            };
            // Not sent: the rest of its aggregate in this batch waits.
            if let Some(k) = k {
                let chain = chains.entry(k).or_insert((id, Vec::new()));
                chain.0 = chain.0.max(id);
                if let Some(waiting) = live {
                    chain.1.push((id, waiting));
                }
                broken.insert(k);
            }
        }
        crate::metrics::order_breaks(order_breaks);
        if let Some(reason) = destination_down {
            p.release_reason = reason;
        } else if !broken.is_empty() && !p.released.is_empty() {
            p.release_reason = "held back: an earlier message of its aggregate was not sent".into();
        }
        // Narrow before the statement: a claim running meanwhile must not
        // take what comes after a message left live.
        {
            let mut gates = self.order.gates();
            for (k, (_, live)) in &chains {
                for (id, waiting) in live {
                    gates.hold(*k, *id, *waiting);
                }
            }
        }
        let settled = self.apply(&lease, &p, stats).await.map(|(mut stats, all)| {
            stats.marked_sent += early.len() as u64;
            (stats, all && !batch.early.lost)
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
                for (k, (last, live)) in &chains {
                    if live.is_empty() {
                        if let Some(back) = gates.open(*k, *last) {
                            self.cursor().released(back, now);
                        }
                    }
                }
            }
            _ => {
                let mut first: HashMap<i64, i64> = HashMap::new();
                let ids = p
                    .sent
                    .iter()
                    .copied()
                    .chain(batch.unloadable.iter().copied());
                let ids = ids.chain(p.failed.iter().map(|f| f.0));
                for id in ids
                    .chain(p.dead.iter().map(|d| d.0))
                    .chain(p.released.iter().copied())
                {
                    if let Some(k) = key(id).filter(|k| chains.contains_key(k)) {
                        let f = first.entry(k).or_insert(id);
                        *f = (*f).min(id);
                    }
                }
                for (k, id) in first {
                    gates.hold(k, id, true);
                }
            }
        }
        settled.map(|(stats, _)| stats)
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
