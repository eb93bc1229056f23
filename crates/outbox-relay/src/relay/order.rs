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
//! chain (`open` returns where), even if a later message of the aggregate
//! is known: the rows passed over may lie below it.

use std::collections::{BTreeSet, HashMap, HashSet};

/// What is known of one aggregate.
/// What the gates say of one aggregate (for tests: the relay reads the
/// entries directly).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// A chain ending at `last` is in flight here; `hot` once another
    /// claim brought more of it (then the claim filter holds it back).
    /// `resume`: the lowest message of the aggregate known to be live
    /// above the chain (released behind it, rejected, or a head that was
    /// waiting above a lower chain): the gate goes back to it once the
    /// chain is done.
    Closed {
        last: i64,
        hot: bool,
        resume: Option<i64>,
    },
    /// The lowest live message is this id.
    From(i64),
}

/// What this relay knows of one aggregate.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// A chain of it in flight here: its last id.
    in_flight: Option<i64>,
    /// Messages of it known to be live and not in flight here (failed and
    /// waiting, released, rejected by a claim, or in flight under the
    /// relay that held its bucket before): the lowest is where it goes on
    /// from, and every one of them is kept, so going back to a lower one
    /// (a reaped or replayed message) never forgets a higher one.
    known: BTreeSet<i64>,
    /// Of `known`, those not claimable now (failed and waiting for their
    /// retry, or in flight under another relay): the claim filter lets
    /// through nothing above the lowest. The others (released, rejected)
    /// are pending and come back in id order.
    waiting: BTreeSet<i64>,
    /// Whether a claim's filter held this aggregate back: rows of it were
    /// passed over, below the floor.
    filtered: bool,
    /// The gates' revision when this entry last changed: a check of its
    /// head against the database applies only if nothing changed since the
    /// head was read ([`Gates::heads`], [`Gates::moved`]).
    rev: u64,
}

impl Entry {
    #[cfg(test)]
    fn gate(&self, hot: bool) -> Option<Gate> {
        let lowest = self.known.first().copied();
        match (self.in_flight, lowest) {
            (Some(last), resume) => Some(Gate::Closed { last, hot, resume }),
            (None, Some(h)) => Some(Gate::From(h)),
            (None, None) => None,
        }
    }
}

/// The gates of one relay. Keys are aggregate keys
/// (`aggregate_key(aggregate_type, aggregate_id)` in SQL).
#[derive(Debug, Default)]
pub(crate) struct Gates {
    map: HashMap<i64, Entry>,
    /// Aggregates another claim brought more of while a chain was in
    /// flight: their chains are held back in SQL, so the other pipelines
    /// do not claim and release them batch after batch (one busy
    /// aggregate). Bounded; forgetting one only costs a release.
    hot: HashSet<i64>,
    /// Aggregates whose gate opened since the claim in progress was issued
    /// ([`Self::claiming`]). The claim's snapshot predates that settle: it
    /// may have passed over rows of the aggregate that were in flight then
    /// (a batch of ours about to release them) or below its start (passed
    /// over by the filter), so its rows of it are not a chain from the
    /// head. They are released instead, and the aggregate goes out from
    /// them at the next claim. This also keeps the order oracle of
    /// docs/design/ordering.md §4.5 true: message k+1 is only published by
    /// a claim that started after message k was settled.
    opened: HashSet<i64>,
    /// Bumped at every change of an entry (see `Entry::rev`).
    rev: u64,
}

/// Hot aggregates remembered.
const MAX_HOT: usize = 1024;

/// An aggregate's lowest known live message, as [`Gates::heads`] read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub key: i64,
    pub was: i64,
    rev: u64,
}

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
            let upto = match (e.in_flight, e.waiting.first()) {
                (Some(_), _) if self.hot.contains(k) => i64::MIN,
                (Some(_), _) => continue,
                (None, Some(h)) => *h,
                (None, None) => continue,
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
    /// rows form a chain that is published only if it starts at or below
    /// the aggregate's lowest known live message (a lower one is one we did
    /// not know of, e.g. replayed) and stops there. Admitted chains close
    /// their gate; rejected rows stay live (in flight until their release
    /// commits: a claim meanwhile skips them, locked), so they are known.
    pub fn admit(&mut self, rows: &[(i64, i64)]) -> Admitted {
        let mut out = Admitted::default();
        let mut by_key: HashMap<i64, Vec<i64>> = HashMap::new();
        for &(id, key) in rows {
            by_key.entry(key).or_default().push(id);
        }
        for (key, ids) in by_key {
            // The chain may run up to the first message known to be live
            // that the claim did not bring (waiting for its retry, or
            // locked): nothing of the aggregate may pass it.
            let bound = if self.opened.contains(&key) {
                None
            } else {
                match self.map.get(&key) {
                    None => Some(i64::MAX),
                    Some(e) if e.in_flight.is_some() => None,
                    Some(e) => Some(
                        e.known
                            .iter()
                            .find(|k| ids.binary_search(k).is_err())
                            .map_or(i64::MAX, |k| k.saturating_sub(1)),
                    ),
                }
            };
            let (chain, rest): (Vec<i64>, Vec<i64>) =
                ids.iter().partition(|&&id| bound.is_some_and(|b| id <= b));
            self.rev += 1;
            let e = self.map.entry(key).or_default();
            e.rev = self.rev;
            if !rest.is_empty() && e.in_flight.is_some() {
                // More of an aggregate in flight here: hold it back in SQL
                // from now on rather than claim and release it.
                if self.hot.len() >= MAX_HOT {
                    self.hot.clear();
                }
                self.hot.insert(key);
            }
            // Rejected rows stay live (in flight until their release
            // commits, then pending): the aggregate goes on from them.
            e.known.extend(rest.iter().copied());
            out.rejected.extend(rest);
            if let Some(&last) = chain.last() {
                e.in_flight = Some(last);
                for id in &chain {
                    e.known.remove(id);
                    e.waiting.remove(id);
                }
            }
            if e.in_flight.is_none() && e.known.is_empty() {
                self.map.remove(&key);
            }
        }
        out.rejected.sort_unstable();
        out
    }

    /// Message `id` of aggregate `key` stays live after its chain's settle
    /// (failed, released): only ids up to the lowest such may be claimed.
    /// Called before the statement, for every message of the chain left live.
    pub fn hold(&mut self, key: i64, id: i64, waiting: bool) {
        self.rev += 1;
        let e = self.map.entry(key).or_default();
        e.rev = self.rev;
        e.in_flight = None;
        e.known.insert(id);
        if waiting {
            e.waiting.insert(id);
        }
    }

    /// The chain of `key` ending at `last` is sent or dead, and the
    /// statement committed. Returns where the claim floor must go back to,
    /// if the aggregate is now free and the filter passed rows of it over.
    pub fn open(&mut self, key: i64, last: i64) -> Option<i64> {
        let e = self.map.get_mut(&key)?;
        self.opened.insert(key);
        self.rev += 1;
        e.rev = self.rev;
        e.in_flight = None;
        Self::settled(&mut self.map, key, last)
    }

    /// After the aggregate's chain ending at (or head) `last` is gone: the
    /// entry is dropped if nothing of it is known to be live, and if the
    /// filter passed rows of it over, the floor goes back to just past
    /// `last`. Even when a message above is known (rejected, released):
    /// the rows passed over may lie between `last` and it, and a claim
    /// from above them that brought only the known one would admit it
    /// ahead of them.
    fn settled(map: &mut HashMap<i64, Entry>, key: i64, last: i64) -> Option<i64> {
        let e = map.get_mut(&key)?;
        let rewind = std::mem::take(&mut e.filtered).then(|| last.saturating_add(1));
        if e.known.is_empty() && e.in_flight.is_none() {
            map.remove(&key);
        }
        rewind
    }

    /// The reaper took message `id` of `key` back from an expired lease: if
    /// this relay knows the aggregate, the message is live again (its
    /// chain's settle, if any, will find its lease lost).
    pub fn reaped(&mut self, key: i64, id: i64) {
        if let Some(e) = self.map.get_mut(&key) {
            self.rev += 1;
            e.rev = self.rev;
            e.known.insert(id);
            e.waiting.insert(id);
            // A chain of ours that lost its lease can settle none of it:
            // the aggregate goes on from the reaped message.
            if e.in_flight.is_some_and(|last| id <= last) {
                e.in_flight = None;
            }
        }
    }

    /// Loads what a relay taking buckets over must hold back: `(key, lowest
    /// live id)`. A chain of our own in flight keeps its gate.
    pub fn load(&mut self, held: &[(i64, i64)]) {
        for &(key, id) in held {
            self.rev += 1;
            let e = self.map.entry(key).or_default();
            e.rev = self.rev;
            if e.in_flight.is_none() {
                e.known.insert(id);
                e.waiting.insert(id);
            }
        }
    }

    /// Forgets what is known of the aggregates `keep` refuses (buckets
    /// lost, or everything after losing the registration); chains in
    /// flight here keep their gate until settled.
    pub fn forget(&mut self, keep: impl Fn(i64) -> bool) {
        self.rev += 1;
        let rev = self.rev;
        self.map.retain(|k, e| {
            if keep(*k) {
                return true;
            }
            e.rev = rev;
            e.known.clear();
            e.waiting.clear();
            e.in_flight.is_some()
        });
    }

    /// Every aggregate held back and not in flight here, with the lowest
    /// message known to be live (waiting or not) and the entry's revision:
    /// to check against the database that it still is. Every known message
    /// is checked in turn, not only the ones waiting for a retry: a chain
    /// settled after its bucket passed to another relay leaves released
    /// messages here that the other relay then sends, and a known message
    /// that is gone would hold its aggregate back for good.
    pub fn heads(&self) -> Vec<Head> {
        self.map
            .iter()
            .filter(|(_, e)| e.in_flight.is_none())
            .filter_map(|(k, e)| {
                e.known.first().map(|h| Head {
                    key: *k,
                    was: *h,
                    rev: e.rev,
                })
            })
            .collect()
    }

    /// `head.was` was found gone: `now` is the aggregate's lowest live
    /// message at or above it, or none, so every message known below `now`
    /// is gone too. Ignored if the entry changed since the head was read.
    /// Returns where the floor must go back to, as [`Self::open`].
    pub fn moved(&mut self, head: Head, now: Option<i64>) -> Option<i64> {
        let Head { key, was, rev } = head;
        let e = self.map.get_mut(&key)?;
        if e.rev != rev
            || e.in_flight.is_some()
            || e.known.first() != Some(&was)
            || now == Some(was)
        {
            return None;
        }
        let upto = now.unwrap_or(i64::MAX);
        e.known.retain(|&id| id >= upto);
        e.waiting.retain(|&id| id >= upto);
        if let Some(id) = now {
            e.known.insert(id);
            e.waiting.insert(id);
        }
        self.rev += 1;
        e.rev = self.rev;
        Self::settled(&mut self.map, key, was)
    }

    /// The gate of `key` (tests and logs).
    #[cfg(test)]
    pub fn gate(&self, key: i64) -> Option<Gate> {
        self.map
            .get(&key)
            .and_then(|e| e.gate(self.hot.contains(&key)))
    }
}

#[cfg(test)]
mod tests;
