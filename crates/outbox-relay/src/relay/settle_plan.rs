//! What settling a published batch decides, without the database or the
//! clock: which rows are sent, failed (with their error and next run time),
//! dead (with the reason) or released, and what the per-aggregate gates
//! must learn before the settle statement and after it. `settle.rs` asks
//! the destination when the plan needs it, then applies the plan.

use super::{PassStats, PublishedBatch};
use crate::retry::{saturating_add_std, RetryPolicy};
use crate::store::SettleParams;
use crate::{Outcome, PublishError};
use chrono::{DateTime, Utc};
use rand::Rng;
use std::collections::{BTreeMap, HashSet};

/// `last_error` of rows held back by the claim (never published).
pub(super) const HELD_BACK: &str = "held back: an earlier message of its aggregate is not sent yet";

/// `last_error` of rows released behind an earlier message of their
/// aggregate that this settle leaves live.
pub(super) const BEHIND_UNSENT: &str =
    "held back: an earlier message of its aggregate was not sent";

/// `last_error` of rows released because publishing was abandoned.
pub(super) const AT_SHUTDOWN: &str = "released at shutdown";

/// The decisions of one settle, applied by `Relay::settle`.
#[derive(Debug, Default)]
pub(super) struct SettlePlan {
    /// The pass's counts known before the statement (claimed, published,
    /// and the unloadable rows already settled dead).
    pub stats: PassStats,
    /// The settle statement.
    pub params: SettleParams,
    /// Rows marked sent while the rest of the batch was in flight.
    pub early_sent: u64,
    /// An early settle lost the lease of some rows: the gates cannot
    /// trust this batch's outcome.
    pub early_lost: bool,
    /// Messages the destination accepted after refusing an earlier one of
    /// their aggregate (a pipelined publisher): delivered out of order.
    pub order_breaks: u64,
    /// Before the statement, the gates hold `(aggregate, id, waits for a
    /// retry)`: every message of a chain left live, in aggregate order.
    pub hold: Vec<(i64, i64, bool)>,
    /// After a statement that settled every row: `(aggregate, last id)` of
    /// each chain that is over (every message sent or dead), to open.
    pub open: Vec<(i64, i64)>,
    /// After a statement that failed or lost rows: `(aggregate, first id)`,
    /// every chain held at its start until the check of heads sets it right.
    pub hold_on_doubt: Vec<(i64, i64)>,
}

/// The counts of a pass known before anything is settled.
pub(super) fn pass_stats(batch: &PublishedBatch) -> PassStats {
    PassStats {
        claimed: batch.claimed(),
        published: batch.published(),
        failed: batch.unloadable.len() as u64,
        dead: batch.unloadable.len() as u64,
        aggregates: batch.keys.values().collect::<HashSet<_>>().len(),
        held_back: batch.held_back.len(),
        read_on: batch.read_on,
        ..PassStats::default()
    }
}

/// Whether the plan needs to know if the destination is down: some rows
/// failed retryably, which may be the destination's fault rather than
/// theirs (not asked when publishing was abandoned: those are released).
pub(super) fn asks_destination(batch: &PublishedBatch) -> bool {
    let Some(outcomes) = &batch.outcomes else {
        return false;
    };
    !batch.not_dead_lettered.is_empty()
        || batch.messages.iter().zip(outcomes).any(|(m, o)| {
            matches!(o, Err(e) if e.is_retryable()) && !batch.early.ids.contains(&m.id)
        })
}

/// Per aggregate in the batch: its last id, and the ids left live, each
/// with whether it waits for a retry (not claimable at once).
#[derive(Debug)]
struct Chain {
    last: i64,
    live: Vec<(i64, bool)>,
}

impl SettlePlan {
    /// Plans the settle of `batch` (its lease taken out) at `now`:
    /// `unreachable` is why the destination is down, if it was asked
    /// ([`asks_destination`]) and is; `rng` spreads the retry times.
    ///
    /// With ordering on, each aggregate's messages in the batch are a
    /// chain: after the first that is not sent, the rest are released (no
    /// attempt spent) and go out after it. A message the destination
    /// accepted anyway stays sent, counted as an order break.
    pub fn new(
        batch: PublishedBatch,
        policy: &RetryPolicy,
        now: DateTime<Utc>,
        unreachable: Option<String>,
        rng: &mut impl Rng,
    ) -> Self {
        let stats = pass_stats(&batch);
        let mut p = SettleParams {
            released: batch.held_back,
            release_reason: HELD_BACK.into(),
            ..SettleParams::default()
        };
        // Marked sent already, while the rest of the batch was in flight:
        // accepted, whatever the publish said after (it may have missed
        // its deadline on the others).
        let early = &batch.early.ids;
        // Retryable failures with the destination down are released
        // without spending their attempts (an outage never pushes messages
        // into dead); so is everything when publishing was abandoned.
        let down = match batch.outcomes {
            None => Some(AT_SHUTDOWN.to_owned()),
            Some(_) => unreachable.map(|why| format!("destination unreachable: {why}")),
        };
        // Every row of the batch with what became of it, in id order.
        let mut rows: Vec<(i64, i32, Outcome)> = match batch.outcomes {
            Some(outcomes) => batch
                .messages
                .iter()
                .zip(outcomes)
                .map(|(m, o)| {
                    (
                        m.id,
                        m.attempts,
                        if early.contains(&m.id) { Ok(()) } else { o },
                    )
                })
                .collect(),
            None => batch
                .messages
                .iter()
                .map(|m| {
                    let o = if early.contains(&m.id) {
                        Ok(())
                    } else {
                        Err(PublishError::retryable(AT_SHUTDOWN))
                    };
                    (m.id, m.attempts, o)
                })
                .collect(),
        };
        rows.extend(
            batch
                .not_dead_lettered
                .into_iter()
                .map(|(id, why)| (id, 0, Err(PublishError::retryable(why)))),
        );
        rows.sort_unstable_by_key(|r| r.0);
        // A destination's Retry-After is honoured up to the policy's longest
        // step: `Retry-After: 9000000000000` must neither overflow the
        // timestamp (a panic, then a crash loop on the same row) nor park
        // a message for centuries.
        let longest = policy.longest_delay();
        let keys = &batch.keys;
        let key = |id: i64| keys.get(&id).copied();
        let mut chains: BTreeMap<i64, Chain> = BTreeMap::new();
        for id in &batch.unloadable {
            if let Some(k) = key(*id) {
                chains
                    .entry(k)
                    .or_insert(Chain {
                        last: *id,
                        live: Vec::new(),
                    })
                    .last = *id;
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
                    if let Some(k) = k {
                        let chain = chains.entry(k).or_insert(Chain {
                            last: id,
                            live: Vec::new(),
                        });
                        chain.last = chain.last.max(id);
                    }
                    continue;
                }
                Err(e) if behind || (e.is_retryable() && down.is_some()) => {
                    p.released.push(id);
                    Some(false)
                }
                Err(e) if e.is_retryable() && !policy.exhausted(attempts) => {
                    let mut at = policy.next_run_at_with(attempts, now, rng);
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
                let chain = chains.entry(k).or_insert(Chain {
                    last: id,
                    live: Vec::new(),
                });
                chain.last = chain.last.max(id);
                if let Some(waiting) = live {
                    chain.live.push((id, waiting));
                }
                broken.insert(k);
            }
        }
        if let Some(reason) = down {
            p.release_reason = reason;
        } else if !broken.is_empty() && !p.released.is_empty() {
            p.release_reason = BEHIND_UNSENT.into();
        }
        let hold = chains
            .iter()
            .flat_map(|(k, c)| c.live.iter().map(|(id, waiting)| (*k, *id, *waiting)))
            .collect();
        let open = chains
            .iter()
            .filter(|(_, c)| c.live.is_empty())
            .map(|(k, c)| (*k, c.last))
            .collect();
        // On doubt, each chain is held at its first row settled here.
        let mut first: BTreeMap<i64, i64> = BTreeMap::new();
        let settled = p
            .sent
            .iter()
            .copied()
            .chain(batch.unloadable.iter().copied());
        let settled = settled
            .chain(p.failed.iter().map(|f| f.0))
            .chain(p.dead.iter().map(|d| d.0))
            .chain(p.released.iter().copied());
        for id in settled {
            if let Some(k) = key(id).filter(|k| chains.contains_key(k)) {
                let f = first.entry(k).or_insert(id);
                *f = (*f).min(id);
            }
        }
        Self {
            stats,
            params: p,
            early_sent: early.len() as u64,
            early_lost: batch.early.lost,
            order_breaks,
            hold,
            open,
            hold_on_doubt: first.into_iter().collect(),
        }
    }
}

#[cfg(test)]
#[path = "settle_plan_tests.rs"]
mod tests;
