//! Checkers for per-aggregate order (issue 12), on what a destination
//! received and on what the outbox recorded as sent.
//!
//! The guarantee checked: among the messages of one aggregate
//! `(aggregate_type, aggregate_id)`, message k+1 is handed to the publisher
//! only after k is sent (or dead). At the destination this reads:
//! * no attempt of k+1 arrives before the first accepted delivery of k
//!   ([`OrderReport::early`]);
//! * hence the first accepted deliveries of an aggregate arrive in id order
//!   ([`OrderReport::out_of_order`]).
//!
//! Duplicates (a message accepted more than once) are allowed only where a
//! crash or a lease takeover explains them; the caller decides which.

use crate::webhook::Received;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// An aggregate: `(aggregate_type, aggregate_id)`.
pub type Aggregate = (String, String);

/// One request as the destination saw it, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message's aggregate.
    pub aggregate: Aggregate,
    /// The outbox row id.
    pub message_id: i64,
    /// Whether the destination accepted it (a 2xx answer).
    pub accepted: bool,
}

/// The webhook requests of `received` (in arrival order) as deliveries,
/// read from the CloudEvent body (`aggregatetype`, `subject`, `outboxid`).
/// Requests without a `webhook-id` (the relay's HEAD checks) are skipped.
pub fn from_webhooks(received: &[Received]) -> Vec<Delivery> {
    received
        .iter()
        .filter(|r| !r.id.is_empty())
        .map(|r| {
            let ce = r.json();
            let text = |k: &str| {
                ce[k]
                    .as_str()
                    .unwrap_or_else(|| panic!("webhook body without {k}: {}", r.body))
                    .to_owned()
            };
            Delivery {
                aggregate: (text("aggregatetype"), text("subject")),
                message_id: text("outboxid").parse().expect("outboxid is a row id"),
                accepted: (200..300).contains(&r.status),
            }
        })
        .collect()
}

/// What [`check`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OrderReport {
    /// Distinct messages accepted at least once.
    pub messages: usize,
    /// Distinct aggregates among them.
    pub aggregates: usize,
    /// Attempts in all (accepted or not).
    pub attempts: usize,
    /// Attempts the destination refused.
    pub refused: usize,
    /// Aggregates whose first accepted deliveries are not in id order.
    pub out_of_order: Vec<Aggregate>,
    /// Aggregates with a message attempted before the first accepted
    /// delivery of the message before it: `(aggregate, predecessor, id)`.
    pub early: Vec<(Aggregate, i64, i64)>,
    /// Messages accepted more than once, with how many extra copies.
    pub duplicates: BTreeMap<i64, usize>,
    /// Messages attempted but never accepted.
    pub never_accepted: Vec<i64>,
}

impl OrderReport {
    /// Extra accepted copies in all.
    pub fn duplicate_copies(&self) -> usize {
        self.duplicates.values().sum()
    }
}

impl std::fmt::Display for OrderReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "messages={} aggregates={} out_of_order={} early={} duplicates={} attempts={} refused={}",
            self.messages,
            self.aggregates,
            self.out_of_order.len(),
            self.early.len(),
            self.duplicate_copies(),
            self.attempts,
            self.refused
        )
    }
}

/// Checks deliveries (in arrival order) for per-aggregate order. An
/// aggregate's messages are the ids seen for it; compare
/// [`OrderReport::messages`] with what was committed to know none is
/// missing.
pub fn check(deliveries: &[Delivery]) -> OrderReport {
    // Per aggregate, per message: index of its first attempt and of its
    // first accepted delivery.
    #[derive(Default)]
    struct Seen {
        first_attempt: usize,
        first_accepted: Option<usize>,
        accepted: usize,
    }
    let mut per: HashMap<&Aggregate, BTreeMap<i64, Seen>> = HashMap::new();
    let mut report = OrderReport {
        attempts: deliveries.len(),
        ..OrderReport::default()
    };
    for (i, d) in deliveries.iter().enumerate() {
        let s = per
            .entry(&d.aggregate)
            .or_default()
            .entry(d.message_id)
            .or_insert(Seen {
                first_attempt: i,
                ..Seen::default()
            });
        if d.accepted {
            s.first_accepted.get_or_insert(i);
            s.accepted += 1;
        } else {
            report.refused += 1;
        }
    }
    let mut aggregates = BTreeSet::new();
    for (agg, msgs) in &per {
        // In id order (BTreeMap): first accepted deliveries must rise.
        let mut last_accepted: Option<usize> = None;
        let mut in_order = true;
        let mut prev: Option<(i64, Option<usize>)> = None;
        for (&id, s) in msgs {
            match s.first_accepted {
                Some(at) => {
                    report.messages += 1;
                    aggregates.insert(*agg);
                    if s.accepted > 1 {
                        report.duplicates.insert(id, s.accepted - 1);
                    }
                    if last_accepted.is_some_and(|l| l > at) {
                        in_order = false;
                    }
                    last_accepted = Some(at);
                }
                None => report.never_accepted.push(id),
            }
            if let Some((p, p_accepted)) = prev {
                if p_accepted.map_or(true, |a| a > s.first_attempt) {
                    report.early.push(((*agg).clone(), p, id));
                }
            }
            prev = Some((id, s.first_accepted));
        }
        if !in_order {
            report.out_of_order.push((*agg).clone());
        }
    }
    report.aggregates = aggregates.len();
    report.out_of_order.sort();
    report.early.sort();
    report.never_accepted.sort_unstable();
    report
}

/// Order violations recorded in `messages_sent` (the design note's race
/// checker): one query for every test, in [`crate::ordering`].
pub use crate::ordering::sent_order_violations;

#[cfg(test)]
mod tests {
    use super::*;

    fn d(agg: &str, id: i64, accepted: bool) -> Delivery {
        Delivery {
            aggregate: ("a".into(), agg.into()),
            message_id: id,
            accepted,
        }
    }

    #[test]
    fn in_order_with_a_retry_and_a_duplicate() {
        let r = check(&[
            d("x", 1, false),
            d("y", 2, true),
            d("x", 1, true),
            d("x", 3, true),
            d("x", 1, true),
            d("x", 3, true),
        ]);
        assert!(r.out_of_order.is_empty() && r.early.is_empty(), "{r:?}");
        assert_eq!((r.messages, r.aggregates, r.refused), (3, 2, 1));
        assert_eq!(r.duplicates, BTreeMap::from([(1, 1), (3, 1)]));
        assert_eq!(r.duplicate_copies(), 2);
    }

    #[test]
    fn overtaking_is_caught() {
        let r = check(&[d("x", 3, true), d("x", 1, true), d("y", 2, true)]);
        assert_eq!(r.out_of_order, vec![("a".into(), "x".into())]);
        assert_eq!(r.early, vec![(("a".into(), "x".into()), 1, 3)]);
    }

    #[test]
    fn an_attempt_before_the_predecessor_was_accepted_is_early() {
        // 2 is tried (and refused) while 1 has only been refused: first
        // accepted deliveries are in order, but 2 went out too soon.
        let r = check(&[
            d("x", 1, false),
            d("x", 2, false),
            d("x", 1, true),
            d("x", 2, true),
        ]);
        assert!(r.out_of_order.is_empty());
        assert_eq!(r.early, vec![(("a".into(), "x".into()), 1, 2)]);
    }

    #[test]
    fn never_accepted_is_reported() {
        let r = check(&[d("x", 1, false)]);
        assert_eq!(r.never_accepted, vec![1]);
        assert_eq!(r.messages, 0);
    }
}
