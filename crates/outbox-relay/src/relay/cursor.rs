//! Where the next claim starts reading the claimable index.
//!
//! A claim reads the claimable index in id order. Every row the relay sends
//! leaves an index entry behind until vacuum removes it, and while any
//! snapshot older than the deletion is open (a long report, a REPEATABLE
//! READ transaction left open) PostgreSQL cannot even mark the entry dead:
//! a claim starting at the first id visits every one of them, and claims slow down
//! with each message sent (measured: 0.42x after 200,000 messages under a
//! held transaction). The cursor starts claims past the rows already dealt
//! with: its floor.
//!
//! A row below the floor can still become claimable, so the floor moves
//! only where that is accounted for:
//! * its transaction committed after a claim read past its id (an id is
//!   taken at INSERT, visibility comes at COMMIT): the floor passes a
//!   claim's rows only once every transaction that had started by the next
//!   claim has ended (the xmax of a snapshot taken after the claim returned
//!   is at or below a later snapshot's xmin), and only as far as that later
//!   claim read, from at or below the floor: it saw those rows committed.
//!   Not the claim's own snapshot: a row it read past may be a moment from
//!   being written. And only because the id's default takes the
//!   transaction's xid before it draws the id (migration 9): before that,
//!   an INSERT drew its id first and got its xid only when writing the
//!   row, and a backend preempted in between (1 message in about 100,000
//!   at 1,000 msg/s on 2 busy cores) was no running transaction in the
//!   next snapshot, so the floor passed its row;
//! * this relay failed it (due later) or released it: rewound to it, when
//!   due or at once;
//! * another relay failed or released it, the reaper recovered it, an
//!   operator replayed it, or an id was drawn long before its INSERT: a
//!   sweep from the first id every `sweep_interval` finds it, and a claim that
//!   finds rows below the floor brings the floor down to them.
//!
//! So the floor never loses a row; at worst it delays one by a sweep
//! interval.

pub use crate::store::ClaimSnapshot;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Where a sweep reads from: every id, even ones given by hand below the
/// sequence's start.
pub const FROM_ALL: i64 = i64::MIN;

/// Claims remembered while their snapshot's transactions run; past this,
/// the oldest are forgotten (the floor just advances less).
const MAX_WAITING: usize = 1024;

/// How long a pass goes on at least between two looks back (see
/// `Pass::xmax`). A look back reads from the floor one bounded claim that a
/// long backlog held back makes read rows already known to wait: this
/// bounds that to a few claims a second, and what a row committed late in a
/// span the pass went past waits to about this long (it was the sweep
/// interval).
const LOOK_BACK_EVERY: chrono::TimeDelta = chrono::TimeDelta::milliseconds(50);

/// A claim the floor may pass once the transactions that had started by
/// the next claim have ended.
#[derive(Debug, Clone, Copy)]
struct Covered {
    /// The floor the claim read from.
    from: i64,
    /// One past the highest id it claimed.
    upto: i64,
    /// When the claim returned.
    returned: DateTime<Utc>,
    /// The xmax of the first claim snapshot taken after that: every
    /// transaction that could hold a row below `upto` has an id below it.
    xmax: Option<i64>,
}

/// The floor and what may move it. Pure bookkeeping, no SQL.
#[derive(Debug)]
pub struct ClaimCursor {
    floor: i64,
    waiting: Vec<Covered>,
    due: Vec<(DateTime<Utc>, i64)>,
    last_sweep: Option<DateTime<Utc>>,
    sweep_interval: Duration,
    /// When rows last went back below the floor: a claim that started
    /// before then may have seen them claimed, and vouches for nothing.
    rewound_at: Option<DateTime<Utc>>,
    /// The current pass, when a claim read a bounded span and took nothing
    /// of it (see `Claimed::scanned_upto`): the next claims read past it,
    /// without waiting for the floor (which waits for the transactions that
    /// were running), until a claim reads nothing more, rows go back below
    /// it, or a sweep starts.
    pass: Option<Pass>,
}

/// A pass reading past spans it took nothing of.
#[derive(Debug, Clone, Copy)]
struct Pass {
    /// Where the next claim of the pass reads from.
    resume: i64,
    /// The next claim reads from the floor once, then the pass goes on.
    look_back: bool,
    /// When the claim that began it, or its last look back, returned.
    began: DateTime<Utc>,
    /// The xmax of the first claim snapshot taken after that: a row
    /// committed late in a span the pass went past since belongs to a
    /// transaction below it. Once a snapshot's xmin reaches it, every such
    /// row is visible, and one claim reads from the floor (a look back);
    /// only above the floor (a sweep walks up to it first), and at most
    /// every `LOOK_BACK_EVERY`. Without it such a row waited as long as the
    /// pass went on: in a steady stream, where every claim finds new rows
    /// and none reads nothing more, until the next sweep (the latency tail
    /// measured at 0.8 to 1.6 s).
    xmax: Option<i64>,
}

impl ClaimCursor {
    /// A cursor that starts with a sweep and sweeps every `sweep_interval`.
    pub fn new(sweep_interval: Duration) -> Self {
        Self {
            floor: FROM_ALL,
            waiting: Vec::new(),
            due: Vec::new(),
            last_sweep: None,
            sweep_interval,
            rewound_at: None,
            pass: None,
        }
    }

    /// Where the next claim starts: [`FROM_ALL`] when a sweep is due, else the floor
    /// (brought down first to rows this relay failed that are now due).
    pub fn next_from(&mut self, now: DateTime<Utc>) -> i64 {
        let interval =
            chrono::Duration::from_std(self.sweep_interval).unwrap_or(chrono::Duration::MAX);
        if self.last_sweep.map_or(true, |at| now - at >= interval) {
            self.last_sweep = Some(now);
            self.pass = None;
            return FROM_ALL;
        }
        let due: Vec<i64> = self
            .due
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect();
        self.due.retain(|(at, _)| *at > now);
        if let Some(&id) = due.iter().min() {
            self.rewind(id, now);
        }
        match &mut self.pass {
            Some(p) if !p.look_back => p.resume,
            Some(p) => {
                p.look_back = false;
                self.floor
            }
            None => self.floor,
        }
    }

    /// A claim that started at `started` read from `from` under `snapshot`
    /// and took ids `found` (lowest, highest), if any, dealing with every
    /// row up to `read_upto` (at least the highest taken: a filtered claim
    /// may have read further, see `Claimed::scanned_upto`); it returned at
    /// `now`. True when the next claim should look back from the floor:
    /// it should follow at once, even if this one found nothing to do.
    pub fn claimed(
        &mut self,
        from: i64,
        found: Option<(i64, i64)>,
        read_upto: i64,
        snapshot: ClaimSnapshot,
        started: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> bool {
        // Rows below the floor (a sweep found them): more may follow.
        if let Some((min, _)) = found.filter(|(min, _)| *min < self.floor) {
            self.rewind(min, now);
        }
        let max = found.map_or(read_upto, |(_, max)| max.max(read_upto));
        let floor = self.floor;
        if let Some(p) = &mut self.pass {
            match p.xmax {
                None if p.began <= started => p.xmax = Some(snapshot.xmax),
                Some(x)
                    if snapshot.xmin >= x
                        && p.resume > floor
                        && started - p.began >= LOOK_BACK_EVERY =>
                {
                    p.look_back = true;
                    p.began = now;
                    p.xmax = None;
                }
                _ => {}
            }
        }
        // Took nothing of a bounded span: the pass goes on past it (a claim
        // that took rows stays where the pass is; a look back leaves it
        // where it was). Else a long backlog held back would be read span
        // after span from the floor again, and a transaction left open
        // (which holds the floor) would stop the relay at the first span.
        // Not if rows went back below it while the claim ran (a gate that
        // opened, a release): they may lie in the span it read.
        let clean = self.rewound_at.map_or(true, |at| started >= at);
        if found.is_none() && clean {
            let resume = max.saturating_add(1);
            match &mut self.pass {
                Some(p) => p.resume = p.resume.max(resume),
                None => {
                    self.pass = Some(Pass {
                        resume,
                        look_back: false,
                        began: now,
                        xmax: None,
                    })
                }
            }
        }
        for c in &mut self.waiting {
            if c.xmax.is_none() && c.returned <= started {
                c.xmax = Some(snapshot.xmax);
            }
        }
        if clean {
            if self.waiting.len() == MAX_WAITING {
                self.waiting.remove(0);
            }
            self.waiting.push(Covered {
                from,
                upto: max.saturating_add(1),
                returned: now,
                xmax: None,
            });
        }
        self.advance(snapshot.xmin, from, max);
        self.pass.is_some_and(|p| p.look_back)
    }

    /// The next claim sweeps from the first id (buckets were taken over:
    /// their rows may sit anywhere below the floor).
    pub fn sweep_next(&mut self) {
        self.last_sweep = None;
    }

    /// A claim read nothing more: the next pass starts from the floor.
    pub fn pass_ended(&mut self) {
        self.pass = None;
    }

    /// This relay failed `id`; it is due again at `at`.
    pub fn failed(&mut self, id: i64, at: DateTime<Utc>) {
        self.due.push((at, id));
    }

    /// This relay released `id` at `now`: claimable again at once.
    pub fn released(&mut self, id: i64, now: DateTime<Utc>) {
        self.rewind(id, now);
    }

    /// Row `id` is claimable again: the floor goes back to it, and claims
    /// remembered over it no longer vouch for it (they saw it claimed).
    fn rewind(&mut self, id: i64, now: DateTime<Utc>) {
        self.floor = self.floor.min(id);
        self.pass = None;
        self.waiting.retain(|c| c.upto <= id);
        self.rewound_at = Some(now);
    }

    /// The floor now (for tests and logs).
    pub fn floor(&self) -> i64 {
        self.floor
    }

    /// Moves the floor past every remembered claim whose snapshot's
    /// transactions have all ended by a snapshot with this `xmin`, as far as
    /// the claim with that snapshot read: from `from`, at or below the
    /// floor, up to `read_upto`. That claim saw every row of those
    /// transactions there, committed, and took it or left it for a reason
    /// accounted for (held back, in flight, failed). A claim that read from
    /// above the floor (the pass going on) vouches for nothing beneath where
    /// it started, and none for what lies beyond what it read: a row that
    /// committed after the claim that first read its span lies there unseen.
    fn advance(&mut self, xmin: i64, from: i64, read_upto: i64) {
        if from > self.floor {
            return;
        }
        let reach = read_upto.saturating_add(1);
        // Chained from the floor up: [0, 501) then [501, 1001) and so on.
        // Sorted aside: `waiting` stays oldest first, for forgetting.
        let mut ended: Vec<&Covered> = self
            .waiting
            .iter()
            .filter(|c| c.xmax.is_some_and(|x| x <= xmin))
            .collect();
        ended.sort_unstable_by_key(|c| c.from);
        for c in ended {
            if c.from <= self.floor {
                self.floor = self.floor.max(c.upto.min(reach));
            }
        }
        let floor = self.floor;
        self.waiting.retain(|c| c.upto > floor);
    }
}

#[cfg(test)]
mod tests;
