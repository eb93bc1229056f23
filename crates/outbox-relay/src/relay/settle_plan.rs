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

/// What becomes of one row that was published (or was to be).
#[derive(Debug, PartialEq)]
enum Fate {
    Sent,
    /// Back to pending, no attempt spent.
    Released,
    /// To be retried: the error, and when.
    Failed(String, DateTime<Utc>),
    /// The reason.
    Dead(String),
}

/// How one row is settled, from its outcome; `behind` when an earlier
/// message of its aggregate in the batch is left live, `down` when the
/// destination is (or publishing was abandoned).
fn fate(
    outcome: Outcome,
    attempts: i32,
    behind: bool,
    down: bool,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
    rng: &mut impl Rng,
) -> Fate {
    match outcome {
        Ok(()) => Fate::Sent,
        Err(e) if behind || (e.is_retryable() && down) => Fate::Released,
        Err(e) if e.is_retryable() && !policy.exhausted(attempts) => {
            let mut at = policy.next_run_at_with(attempts, now, rng);
            // A destination's Retry-After is honoured up to the policy's
            // longest step: `Retry-After: 9000000000000` must neither
            // overflow the timestamp (a panic, then a crash loop on the
            // same row) nor park a message for centuries.
            if let Some(after) = e.retry_after {
                at = at.max(saturating_add_std(now, after.min(policy.longest_delay())));
            }
            Fate::Failed(e.message, at)
        }
        Err(e) if e.is_retryable() => Fate::Dead(format!(
            "max attempts ({}) reached: {}",
            policy.max_attempts, e.message
        )),
        Err(e) => Fate::Dead(format!("permanent: {}", e.message)),
    }
}

/// Every row of the batch that was published (or was to be) with what
/// became of it, in id order: rows sent early count as accepted, whatever
/// the publish said after (it may have missed its deadline on the others);
/// the rest of an abandoned publication fails retryably; rows that could
/// not be dead-lettered fail retryably with their reason, never attempted.
fn outcomes(
    messages: &[crate::Message],
    outcomes: Option<Vec<Outcome>>,
    early: &HashSet<i64>,
    not_dead_lettered: Vec<(i64, String)>,
) -> Vec<(i64, i32, Outcome)> {
    let outcomes =
        outcomes.unwrap_or_else(|| vec![Err(PublishError::retryable(AT_SHUTDOWN)); messages.len()]);
    let mut rows: Vec<(i64, i32, Outcome)> = messages
        .iter()
        .zip(outcomes)
        .map(|(m, o)| {
            (
                m.id,
                m.attempts,
                if early.contains(&m.id) { Ok(()) } else { o },
            )
        })
        .collect();
    rows.extend(
        not_dead_lettered
            .into_iter()
            .map(|(id, why)| (id, 0, Err(PublishError::retryable(why)))),
    );
    rows.sort_unstable_by_key(|r| r.0);
    rows
}

/// Per aggregate in the batch: its last id, and the ids left live, each
/// with whether it waits for a retry (not claimable at once).
#[derive(Debug)]
struct Chain {
    last: i64,
    live: Vec<(i64, bool)>,
}

/// The chains of the batch, by aggregate.
#[derive(Debug, Default)]
struct Chains(BTreeMap<i64, Chain>);

impl Chains {
    /// Row `id` of aggregate `k` is in the batch.
    fn seen(&mut self, k: i64, id: i64) -> &mut Chain {
        let chain = self.0.entry(k).or_insert(Chain {
            last: id,
            live: Vec::new(),
        });
        chain.last = chain.last.max(id);
        chain
    }

    /// Before the statement: every message left live, to hold.
    fn hold(&self) -> Vec<(i64, i64, bool)> {
        let live = self
            .0
            .iter()
            .flat_map(|(k, c)| c.live.iter().map(|l| (*k, l.0, l.1)));
        live.collect()
    }

    /// After a statement that settled every row: the chains that are over.
    fn open(&self) -> Vec<(i64, i64)> {
        let over = self.0.iter().filter(|(_, c)| c.live.is_empty());
        over.map(|(k, c)| (*k, c.last)).collect()
    }

    /// On doubt: each chain at its first row among `settled`.
    fn starts(
        &self,
        settled: impl Iterator<Item = i64>,
        key: impl Fn(i64) -> Option<i64>,
    ) -> Vec<(i64, i64)> {
        let mut first: BTreeMap<i64, i64> = BTreeMap::new();
        for id in settled {
            if let Some(k) = key(id).filter(|k| self.0.contains_key(k)) {
                let f = first.entry(k).or_insert(id);
                *f = (*f).min(id);
            }
        }
        first.into_iter().collect()
    }
}

/// The plan while its rows are settled one by one, in id order.
struct Draft {
    params: SettleParams,
    chains: Chains,
    /// Aggregates with a message left live or dead so far.
    broken: HashSet<i64>,
    order_breaks: u64,
}

impl Draft {
    /// Row `id` (of aggregate `k`, with ordering on) meets its `fate`;
    /// `behind` an earlier message of its aggregate not sent; `early` if
    /// marked sent already.
    fn settle(&mut self, id: i64, k: Option<i64>, fate: Fate, behind: bool, early: bool) {
        let p = &mut self.params;
        // Whether the message stays live: Some(waits for a retry) when
        // failed or released, None when dead.
        let live = match fate {
            Fate::Sent => {
                if !early {
                    p.sent.push(id);
                }
                self.order_breaks += u64::from(behind);
                if let Some(k) = k {
                    self.chains.seen(k, id);
                }
                return;
            }
            Fate::Released => {
                p.released.push(id);
                Some(false)
            }
            Fate::Failed(error, at) => {
                p.failed.push((id, error, at));
                Some(true)
            }
            Fate::Dead(reason) => {
                p.dead.push((id, reason));
                None
            }
        };
        // Not sent: the rest of its aggregate in this batch waits.
        if let Some(k) = k {
            let chain = self.chains.seen(k, id);
            if let Some(waiting) = live {
                chain.live.push((id, waiting));
            }
            self.broken.insert(k);
        }
    }
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
        let p = SettleParams {
            released: batch.held_back,
            release_reason: HELD_BACK.into(),
            ..SettleParams::default()
        };
        // Retryable failures with the destination down are released
        // without spending their attempts (an outage never pushes messages
        // into dead); so is everything when publishing was abandoned.
        let down = match batch.outcomes {
            None => Some(AT_SHUTDOWN.to_owned()),
            Some(_) => unreachable.map(|why| format!("destination unreachable: {why}")),
        };
        let early = &batch.early.ids;
        let rows = outcomes(
            &batch.messages,
            batch.outcomes,
            early,
            batch.not_dead_lettered,
        );
        let keys = &batch.keys;
        let key = |id: i64| keys.get(&id).copied();
        let mut chains = Chains::default();
        for id in &batch.unloadable {
            if let Some(k) = key(*id) {
                // Settled dead already: the chain goes on past them.
                chains.seen(k, *id).last = *id;
            }
        }
        let mut draft = Draft {
            params: p,
            chains,
            broken: HashSet::new(),
            order_breaks: 0,
        };
        for (id, attempts, outcome) in rows {
            let k = key(id);
            let behind = k.is_some_and(|k| draft.broken.contains(&k));
            let fate = fate(outcome, attempts, behind, down.is_some(), policy, now, rng);
            draft.settle(id, k, fate, behind, early.contains(&id));
        }
        let Draft {
            params: mut p,
            chains,
            broken,
            order_breaks,
        } = draft;
        if let Some(reason) = down {
            p.release_reason = reason;
        } else if !broken.is_empty() && !p.released.is_empty() {
            p.release_reason = BEHIND_UNSENT.into();
        }
        let settled = p
            .sent
            .iter()
            .copied()
            .chain(batch.unloadable.iter().copied());
        let settled = settled
            .chain(p.failed.iter().map(|f| f.0))
            .chain(p.dead.iter().map(|d| d.0))
            .chain(p.released.iter().copied());
        let hold_on_doubt = chains.starts(settled, key);
        Self {
            stats,
            early_sent: early.len() as u64,
            early_lost: batch.early.lost,
            order_breaks,
            hold: chains.hold(),
            open: chains.open(),
            hold_on_doubt,
            params: p,
        }
    }
}

#[cfg(test)]
mod tests;
