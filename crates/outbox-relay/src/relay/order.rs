//! Per-aggregate order: what this relay holds back, and why. Pure
//! bookkeeping, no SQL (the statements are in `store/order.rs`).
//!
//! Each aggregate hashes to one of 1,024 buckets, each leased to one relay
//! (migration 7): inside its buckets a relay is the only claimer, so it
//! alone changes the state of their messages, and it keeps one gate per
//! aggregate it knows has a live message it must not overtake:
//! * `Closed`: a chain of the aggregate (consecutive messages, in id order)
//!   is in flight in this relay; nothing else of it may be published;
//! * `From(h)`: message `h` is the aggregate's lowest live one (failed and
//!   waiting, released, or in flight under a relay whose buckets were taken
//!   over); only ids up to `h` may be claimed.
//!
//! An aggregate without a gate has no live message below any claimable
//! one, so a claim's rows of it, in id order, are a valid chain. The rules
//! that keep this true, each tied to the statement it guards:
//! 1. claims are serialized per relay (`Order::claim_turn`), and each
//!    claim's chains are admitted here before the next claim starts;
//! 2. a gate narrows (`hold`) before the settle statement that leaves a
//!    message live (failed or released), and opens (`open`) only after the
//!    settle that sent or killed the aggregate's whole chain committed;
//! 3. on taking buckets over, the aggregates with messages in flight or
//!    waiting there are loaded as `From` gates (`load`), and heads that
//!    another relay settled since are found by a periodic check.
//!
//! Rows passed over by a claim's filter sit below the claim floor; when a
//! gate that filtered opens, the floor is brought back to just past the
//! chain (`open` returns where).

use std::collections::HashMap;

/// What is known of one aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// A chain ending at `last` is in flight here; `hot` once another
    /// claim brought more of it (then the claim filter holds it back).
    /// `resume`: a head known to wait above the chain (the chain was lower
    /// messages we did not know of, e.g. replayed): the gate goes back to it
    /// when the chain is done.
    Closed {
        last: i64,
        hot: bool,
        resume: Option<i64>,
    },
    /// The lowest live message is this id.
    From(i64),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    gate: Gate,
    /// Whether a claim's filter held this aggregate back: rows of it were
    /// passed over, below the floor.
    filtered: bool,
}

/// The gates of one relay. Keys are aggregate keys
/// (`aggregate_key(aggregate_type, aggregate_id)` in SQL).
#[derive(Debug, Default)]
pub(crate) struct Gates {
    map: HashMap<i64, Entry>,
    /// Aggregates another claim brought more of while a chain was in
    /// flight: their next chains are held back in SQL from the start, so
    /// the other pipelines do not claim and release them batch after batch
    /// (one busy aggregate). Bounded; forgetting one only costs a release.
    hot: std::collections::HashSet<i64>,
    /// Aggregates whose gate opened since the claim in progress was issued
    /// ([`Self::claiming`]). The claim's snapshot predates that settle: it
    /// may have passed over rows of the aggregate that were in flight then
    /// (a batch of ours about to release them), so its rows of it are not
    /// a chain from the head. They are released instead, and the aggregate
    /// goes out from them at the next claim. This also keeps the order
    /// oracle of docs/design/ordering.md §4.5 true: message k+1 is only
    /// published by a claim that started after message k was settled.
    opened: std::collections::HashSet<i64>,
}

/// Hot aggregates remembered.
const MAX_HOT: usize = 1024;

/// A claim's verdict on its rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// Rows that must not be published now (another chain of their
    /// aggregate is in flight, or a lower message of it waits): released
    /// without spending an attempt.
    pub rejected: Vec<i64>,
}

impl Gates {
    /// The claim filter: `(key, highest id let through)` for every
    /// aggregate held back in SQL. `From(h)` lets `h` through; a hot
    /// `Closed` lets nothing. Cold `Closed` gates are left to [`Self::admit`]:
    /// in the usual case the next message of an aggregate in flight is far
    /// beyond the claim, and a short filter keeps the claim cheap.
    pub fn held(&mut self) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for (k, e) in self.map.iter_mut() {
            let upto = match e.gate {
                Gate::From(h) => h,
                Gate::Closed { hot: true, .. } => i64::MIN,
                Gate::Closed { hot: false, .. } => continue,
            };
            e.filtered = true;
            out.push((*k, upto));
        }
        out
    }

    /// A claim is about to be issued (under the claim turn): gates that
    /// open from now until its rows are admitted reject them.
    pub fn claiming(&mut self) {
        self.opened.clear();
    }

    /// Admits a claim's rows, `(id, key)` in id order: per aggregate, its
    /// rows form a chain that is published only if it starts at the
    /// aggregate's lowest live message. Admitted chains close their gate.
    pub fn admit(&mut self, rows: &[(i64, i64)]) -> Admitted {
        let mut out = Admitted::default();
        // Per key: None = rejected, Some(upto) = admit ids up to upto.
        let mut verdict: HashMap<i64, Option<i64>> = HashMap::new();
        let mut last: HashMap<i64, i64> = HashMap::new();
        // Per key, its lowest row rejected here.
        let mut rejected: HashMap<i64, i64> = HashMap::new();
        for &(id, key) in rows {
            let v = *verdict.entry(key).or_insert_with(|| {
                if self.opened.contains(&key) {
                    return None;
                }
                match self.map.get(&key) {
                    None => Some(i64::MAX),
                    // A row at or below the head we know of is the head (or
                    // a lower one we did not know of, e.g. replayed): admit
                    // up to the head; later ones wait for it.
                    Some(Entry {
                        gate: Gate::From(h),
                        ..
                    }) if id <= *h => Some(*h),
                    Some(_) => None,
                }
            });
            match v {
                Some(upto) if id <= upto => {
                    last.insert(key, id);
                }
                _ => {
                    out.rejected.push(id);
                    rejected.entry(key).or_insert(id);
                }
            }
        }
        for (key, v) in verdict {
            // Rows rejected here stay live, in flight until their release
            // commits: a claim meanwhile skips them (locked) and could take
            // the aggregate's rows after them as a chain. So the gate waits
            // at the lowest of them once what is in flight is done.
            let waiting = rejected.get(&key).copied();
            match (v, last.get(&key)) {
                (Some(upto), Some(&l)) => {
                    let filtered = self.map.get(&key).is_some_and(|e| e.filtered);
                    let head = (upto != i64::MAX && l < upto).then_some(upto);
                    let resume = match (head, waiting) {
                        (Some(h), Some(w)) => Some(h.min(w)),
                        (h, w) => h.or(w),
                    };
                    self.map.insert(
                        key,
                        Entry {
                            gate: Gate::Closed {
                                last: l,
                                hot: self.hot.contains(&key),
                                resume,
                            },
                            filtered,
                        },
                    );
                }
                _ => {
                    let Some(w) = waiting else { continue };
                    match self.map.get_mut(&key) {
                        // More of an aggregate in flight here: hold it back
                        // in SQL from now on rather than claim and release it.
                        Some(Entry {
                            gate: Gate::Closed { hot, resume, .. },
                            ..
                        }) => {
                            *hot = true;
                            *resume = Some(resume.map_or(w, |r| r.min(w)));
                            if self.hot.len() >= MAX_HOT {
                                self.hot.clear();
                            }
                            self.hot.insert(key);
                        }
                        Some(Entry {
                            gate: Gate::From(h),
                            ..
                        }) if *h <= w => {}
                        // Opened while the claim ran (or a lower row than
                        // the head we knew): the rejected rows are the head.
                        _ => self.hold(key, w),
                    }
                }
            }
        }
        out
    }

    /// Message `id` of aggregate `key` stays live (failed, released): only
    /// ids up to it may be claimed. Called before the statement.
    pub fn hold(&mut self, key: i64, id: i64) {
        let filtered = self.map.get(&key).is_some_and(|e| e.filtered);
        self.map.insert(
            key,
            Entry {
                gate: Gate::From(id),
                filtered,
            },
        );
    }

    /// The chain of `key` ending at `last` is sent or dead, and the
    /// statement committed: the aggregate is free. Returns where the claim
    /// floor must go back to, if the filter passed rows of it over.
    pub fn open(&mut self, key: i64, last: i64) -> Option<i64> {
        let e = self.map.remove(&key)?;
        self.opened.insert(key);
        if let Gate::Closed {
            resume: Some(head), ..
        } = e.gate
        {
            self.map.insert(
                key,
                Entry {
                    gate: Gate::From(head),
                    ..e
                },
            );
            return None;
        }
        e.filtered.then(|| last.saturating_add(1))
    }

    /// The reaper took message `id` of `key` back from an expired lease: if
    /// this relay knows the aggregate, the message is its head now.
    pub fn reaped(&mut self, key: i64, id: i64) {
        match self.map.get(&key).map(|e| e.gate) {
            Some(Gate::Closed { .. }) => self.hold(key, id),
            Some(Gate::From(h)) if id < h => self.hold(key, id),
            _ => {}
        }
    }

    /// Loads what a relay taking buckets over must hold back: `(key, lowest
    /// live id)`. A chain of our own in flight keeps its gate.
    pub fn load(&mut self, held: &[(i64, i64)]) {
        for &(key, id) in held {
            match self.map.get(&key).map(|e| e.gate) {
                Some(Gate::Closed { .. }) => {}
                Some(Gate::From(h)) if h <= id => {}
                _ => self.hold(key, id),
            }
        }
    }

    /// Forgets the `From` gates whose key `keep` refuses (buckets lost, or
    /// everything after losing the registration); chains in flight here
    /// keep theirs until settled.
    pub fn forget(&mut self, keep: impl Fn(i64) -> bool) {
        self.map
            .retain(|k, e| matches!(e.gate, Gate::Closed { .. }) || keep(*k));
    }

    /// Every `From` gate, `(key, head)`: to check that heads are still live.
    pub fn heads(&self) -> Vec<(i64, i64)> {
        self.map
            .iter()
            .filter_map(|(k, e)| match e.gate {
                Gate::From(h) => Some((*k, h)),
                Gate::Closed { .. } => None,
            })
            .collect()
    }

    /// The aggregate's head `was` is gone (settled by a relay that held it
    /// before a takeover): `now` is its lowest live message, or none.
    /// Ignored if the gate changed since it was read. Returns where the
    /// floor must go back to, as [`Self::open`].
    pub fn moved(&mut self, key: i64, was: i64, now: Option<i64>) -> Option<i64> {
        if self.map.get(&key).map(|e| e.gate) != Some(Gate::From(was)) {
            return None;
        }
        match now {
            Some(id) if id == was => None,
            Some(id) => {
                self.hold(key, id);
                None
            }
            None => self.open(key, was),
        }
    }

    /// The gate of `key` (tests and logs).
    #[cfg(test)]
    pub fn gate(&self, key: i64) -> Option<Gate> {
        self.map.get(&key).map(|e| e.gate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: i64 = 11;
    const B: i64 = 22;

    #[test]
    fn an_unknown_aggregate_is_admitted_and_closed() {
        let mut g = Gates::default();
        let a = g.admit(&[(1, A), (2, B), (3, A)]);
        assert!(a.rejected.is_empty());
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 3,
                hot: false,
                resume: None
            })
        );
        assert_eq!(
            g.gate(B),
            Some(Gate::Closed {
                last: 2,
                hot: false,
                resume: None
            })
        );
        assert!(g.held().is_empty(), "cold chains are not filtered in SQL");
    }

    #[test]
    fn more_of_an_aggregate_in_flight_is_rejected_and_then_filtered() {
        let mut g = Gates::default();
        g.admit(&[(1, A), (2, A)]);
        let a = g.admit(&[(3, A), (4, B), (5, A)]);
        assert_eq!(a.rejected, vec![3, 5]);
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 2,
                hot: true,
                resume: Some(3)
            })
        );
        assert_eq!(g.held(), vec![(A, i64::MIN)]);
        // Sent: 3 and 5 are still live (being released), so the aggregate
        // goes on from 3, not from whatever a claim finds next.
        g.claiming();
        assert_eq!(g.open(A, 2), None);
        assert_eq!(g.gate(A), Some(Gate::From(3)));
        assert_eq!(g.held(), vec![(A, 3)]);
        // Its next chain is held back in SQL from the start.
        g.claiming();
        g.admit(&[(3, A)]);
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 3,
                hot: true,
                resume: None
            })
        );
        // Sent: the floor goes back past the chain, where the filter skipped.
        assert_eq!(g.open(A, 3), Some(4));
        assert_eq!(g.gate(A), None);
    }

    /// The race the two-relay test found: a chain of A in flight (1), a
    /// second claim brings 3 and is rejected (3 is then in flight until its
    /// release commits); 1 is sent and its gate opens; a third claim, which
    /// skipped 3 (locked), brings 5. 5 must not go before 3.
    #[test]
    fn rows_rejected_while_a_chain_is_in_flight_are_not_overtaken() {
        let mut g = Gates::default();
        g.claiming();
        g.admit(&[(1, A)]);
        g.claiming();
        assert_eq!(g.admit(&[(3, A)]).rejected, vec![3]);
        assert_eq!(g.open(A, 1), None);
        g.claiming();
        assert_eq!(g.admit(&[(5, A)]).rejected, vec![5], "3 is the head");
        assert_eq!(g.admit(&[(3, A), (5, A)]).rejected, vec![5]);
    }

    /// A gate that opens while a claim runs: the claim's snapshot predates
    /// the settle, so its rows of the aggregate are released, and the
    /// aggregate resumes from them.
    #[test]
    fn a_gate_opened_during_the_claim_rejects_its_rows() {
        let mut g = Gates::default();
        g.claiming();
        g.admit(&[(1, A)]);
        g.claiming();
        g.open(A, 1);
        let a = g.admit(&[(2, A), (3, A), (4, B)]);
        assert_eq!(a.rejected, vec![2, 3]);
        assert_eq!(g.gate(A), Some(Gate::From(2)));
        assert_eq!(
            g.gate(B),
            Some(Gate::Closed {
                last: 4,
                hot: false,
                resume: None
            })
        );
        // The next claim admits them.
        g.claiming();
        assert!(g.admit(&[(2, A)]).rejected.is_empty());
    }

    #[test]
    fn a_waiting_head_lets_only_itself_through() {
        let mut g = Gates::default();
        g.admit(&[(1, A), (2, A), (3, A)]);
        // 1 failed, 2 and 3 released behind it.
        g.hold(A, 1);
        assert_eq!(g.held(), vec![(A, 1)]);
        // A claim that started before the hold brings 2 and 3: too early.
        assert_eq!(g.admit(&[(2, A), (3, A)]).rejected, vec![2, 3]);
        // The head, when due, is admitted alone.
        assert!(g.admit(&[(1, A)]).rejected.is_empty());
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 1,
                hot: false,
                resume: None
            })
        );
        assert_eq!(g.open(A, 1), Some(2), "filtered while waiting");
    }

    #[test]
    fn a_lower_unknown_message_is_admitted_up_to_the_known_head() {
        let mut g = Gates::default();
        g.hold(A, 5);
        let a = g.admit(&[(2, A), (5, A), (6, A)]);
        assert_eq!(a.rejected, vec![6]);
        // 6 stays live (released behind the chain): the aggregate resumes there.
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 5,
                hot: false,
                resume: Some(6)
            })
        );
        g.open(A, 5);
        assert_eq!(g.gate(A), Some(Gate::From(6)));
        // Only a lower one: the known head waits again once it is done.
        g.hold(A, 5);
        g.claiming();
        assert!(g.admit(&[(3, A)]).rejected.is_empty());
        assert_eq!(g.open(A, 3), None);
        assert_eq!(g.gate(A), Some(Gate::From(5)));
    }

    #[test]
    fn a_chain_not_filtered_opens_without_moving_the_floor() {
        let mut g = Gates::default();
        g.admit(&[(1, A)]);
        assert_eq!(g.open(A, 1), None);
    }

    #[test]
    fn takeover_loads_heads_but_keeps_chains_in_flight() {
        let mut g = Gates::default();
        g.admit(&[(1, A)]);
        g.load(&[(A, 1), (B, 7)]);
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 1,
                hot: false,
                resume: None
            })
        );
        assert_eq!(g.gate(B), Some(Gate::From(7)));
        g.forget(|_| false);
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 1,
                hot: false,
                resume: None
            })
        );
        assert_eq!(g.gate(B), None);
    }

    #[test]
    fn a_head_settled_elsewhere_moves_or_opens_the_gate() {
        let mut g = Gates::default();
        g.load(&[(B, 7), (A, 3)]);
        assert_eq!(g.moved(B, 7, Some(7)), None);
        assert_eq!(g.gate(B), Some(Gate::From(7)));
        g.moved(B, 7, Some(9));
        assert_eq!(g.gate(B), Some(Gate::From(9)));
        g.held();
        assert_eq!(g.moved(B, 9, None), Some(10));
        assert_eq!(g.gate(B), None);
        // A stale answer (the gate changed meanwhile) is ignored.
        g.admit(&[(3, A)]);
        assert_eq!(g.moved(A, 3, None), None);
        assert_eq!(
            g.gate(A),
            Some(Gate::Closed {
                last: 3,
                hot: false,
                resume: None
            })
        );
    }
}
