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
//!   Not the claim's own snapshot: an INSERT draws its id a moment before
//!   its transaction gets an id of its own, and a snapshot taken in between
//!   would not count it;
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
    /// it, a sweep starts, or the transactions that were running when it
    /// began have ended.
    pass: Option<Pass>,
}

/// A pass reading past spans it took nothing of.
#[derive(Debug, Clone, Copy)]
struct Pass {
    /// Where the next claim reads from.
    resume: i64,
    /// When the claim that began it returned.
    began: DateTime<Utc>,
    /// The xmax of the first claim snapshot taken after that: a row
    /// committed late in a span the pass went past belongs to a transaction
    /// below it. Once a snapshot's xmin reaches it, every such row is
    /// visible, and the pass gives way to a claim from the floor; else such
    /// a row waited as long as the pass went on (in a steady stream, until
    /// the next sweep: the latency tail measured at 0.8 to 1.6 s).
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
        self.pass.map_or(self.floor, |p| p.resume)
    }

    /// A claim that started at `started` read from `from` under `snapshot`
    /// and took ids `found` (lowest, highest), if any, dealing with every
    /// row up to `read_upto` (at least the highest taken: a filtered claim
    /// may have read further, see `Claimed::scanned_upto`); it returned at
    /// `now`. True when the pass it belonged to ended on it: the next
    /// claim should read from the floor at once, even if this one found
    /// nothing to do.
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
        let mut ended = false;
        if let Some(p) = &mut self.pass {
            match p.xmax {
                None if p.began <= started => p.xmax = Some(snapshot.xmax),
                Some(x) if snapshot.xmin >= x => ended = true,
                _ => {}
            }
        }
        if ended {
            self.pass = None;
        }
        // Took nothing of a bounded span: the pass goes on past it (a claim
        // that took rows stays where the pass is). Else a long backlog held
        // back would be read span after span from the floor again, and a
        // transaction left open (which holds the floor) would stop the
        // relay at the first span.
        // Not if rows went back below it while the claim ran (a gate that
        // opened, a release): they may lie in the span it read. Nor if the
        // pass has just ended: the next claim reads from the floor.
        let clean = self.rewound_at.map_or(true, |at| started >= at);
        if found.is_none() && clean && !ended {
            let resume = max.saturating_add(1);
            match &mut self.pass {
                Some(p) => p.resume = resume,
                None => {
                    self.pass = Some(Pass {
                        resume,
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
        ended
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
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    fn snap(xmin: i64, xmax: i64) -> ClaimSnapshot {
        ClaimSnapshot { xmin, xmax }
    }

    fn swept(interval: u64) -> ClaimCursor {
        let mut c = ClaimCursor::new(Duration::from_secs(interval));
        assert_eq!(c.next_from(t(0)), FROM_ALL, "the first claim sweeps");
        c
    }

    /// One claim after another, each starting after the last returned.
    fn claim(c: &mut ClaimCursor, from: i64, ids: (i64, i64), s: ClaimSnapshot) {
        c.claimed(from, Some(ids), ids.1, s, t(0), t(0));
    }

    /// A filtered claim that took nothing of what it read (every row held
    /// back) still vouches for it: the next claims read past it, and the
    /// floor passes it as far as a claim from the floor has read.
    #[test]
    fn a_claim_that_read_rows_and_took_none_moves_the_floor_past_them() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 500), snap(100, 100));
        c.claimed(FROM_ALL, None, 2_500, snap(101, 101), t(0), t(0));
        assert_eq!(c.floor(), 501, "the first claim is vouched for");
        assert_eq!(c.next_from(t(0)), 2_501, "the pass goes on");
        c.claimed(2_501, None, 4_000, snap(102, 102), t(0), t(0));
        assert_eq!(
            c.floor(),
            501,
            "a claim above the floor vouches for nothing"
        );
        assert_eq!(c.next_from(t(0)), 4_001);
        c.pass_ended();
        assert_eq!(c.next_from(t(0)), 501, "the next pass starts at the floor");
        c.claimed(501, None, 2_500, snap(103, 103), t(0), t(0));
        assert_eq!(c.floor(), 2_501, "as far as it read, no further");
        assert_eq!(c.next_from(t(0)), 2_501);
        c.claimed(
            2_501,
            Some((2_501, 2_600)),
            4_000,
            snap(104, 104),
            t(0),
            t(0),
        );
        assert_eq!(c.floor(), 4_001, "read up to 4,000");
        // The gate that filtered opens: back to past its chain.
        c.released(1_001, t(1));
        assert_eq!(c.floor(), 1_001);
        assert_eq!(c.next_from(t(1)), 1_001);
        c.claimed(1_001, None, 9_000, snap(105, 105), t(1), t(1));
        c.claimed(1_001, None, 9_000, snap(106, 106), t(1), t(1));
        assert_eq!(c.floor(), 9_001);
    }

    /// A row whose transaction commits after the claim that read its span
    /// took nothing there (the pass went on past it) is read again by a
    /// claim from the floor before the floor passes it: claims of the pass
    /// read above it and vouch for nothing below where they started. (The
    /// floor once moved on their snapshots, and only the next sweep found
    /// such a row: a 2 s latency tail at 1,000 msg/s.)
    #[test]
    fn a_row_committed_late_in_a_span_the_pass_went_past_is_read_from_the_floor() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(10, 10));
        // Transaction 11 holds id 1,500, not yet committed; every row this
        // claim sees up to 2,000 is held back.
        c.claimed(FROM_ALL, None, 2_000, snap(10, 12), t(0), t(0));
        assert_eq!(c.next_from(t(0)), 2_001, "the pass goes on");
        // Transaction 11 commits; the pass reads on above 1,500.
        c.claimed(2_001, None, 2_100, snap(12, 13), t(0), t(0));
        c.claimed(2_101, None, 2_200, snap(13, 13), t(0), t(0));
        assert!(
            c.floor() < 1_500,
            "the floor ({}) passed a row no claim saw",
            c.floor()
        );
        c.pass_ended();
        let from = c.next_from(t(1));
        assert!(from <= 1_500, "the next pass starts at {from}");
        c.claimed(from, Some((1_500, 1_500)), 2_000, snap(14, 14), t(1), t(1));
        assert_eq!(c.floor(), 2_001, "past what that claim read, no further");
        c.claimed(2_001, None, 2_200, snap(15, 15), t(1), t(1));
        assert_eq!(c.floor(), 2_201);
    }

    /// In a steady stream the pass may never read nothing more: a row
    /// committed late in a span it went past waited for the next sweep.
    /// The pass ends once every transaction that was running when it began
    /// has ended, and says so: the next claim reads from the floor at once.
    #[test]
    fn a_pass_ends_once_the_transactions_running_when_it_began_have_ended() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(10, 10));
        // Transaction 11 holds id 150 and has not committed; the rows up
        // to 300 are in flight.
        assert!(!c.claimed(FROM_ALL, None, 300, snap(10, 12), t(0), t(0)));
        assert_eq!(c.next_from(t(0)), 301, "the pass goes on");
        // The first snapshot after: what it began under is below 15.
        assert!(!c.claimed(301, Some((301, 310)), 310, snap(11, 15), t(0), t(0)));
        // Rows keep coming; transaction 11 is still open.
        assert!(!c.claimed(301, Some((311, 320)), 320, snap(11, 16), t(0), t(0)));
        assert!(!c.claimed(301, None, 330, snap(11, 17), t(0), t(0)));
        assert_eq!(c.next_from(t(0)), 331, "still the pass");
        // Everything below 15 has ended: the pass gives way.
        assert!(c.claimed(331, Some((331, 340)), 340, snap(15, 18), t(0), t(0)));
        let from = c.next_from(t(0));
        assert!(from <= 150, "the next claim reads from {from}");
        // A claim from the floor takes row 150 and the floor moves on.
        assert!(!c.claimed(from, Some((150, 150)), 340, snap(18, 19), t(0), t(0)));
        assert_eq!(c.next_from(t(0)), c.floor());
    }

    /// A transaction left open does not end the pass: it goes on reading
    /// past spans held back, as before.
    #[test]
    fn a_pass_goes_on_while_a_transaction_that_was_running_stays_open() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(10, 10));
        c.claimed(FROM_ALL, None, 1_000, snap(10, 20), t(0), t(0));
        for (i, from) in (1_001..10_000).step_by(1_000).enumerate() {
            let i = i as i64;
            let ended = c.claimed(from, None, from + 999, snap(10, 21 + i), t(0), t(0));
            assert!(!ended, "transaction 10 is open");
            assert_eq!(c.next_from(t(0)), from + 1_000);
        }
    }

    /// A sweep whose claim read a bounded span (every row of it held back)
    /// goes on from where it stopped, span by span, up to the floor: a row
    /// released by another relay far below the floor is not left waiting
    /// behind an aggregate that clogs the first ids.
    #[test]
    fn a_sweep_goes_on_span_by_span_up_to_the_floor() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 9_000), snap(100, 100));
        claim(&mut c, FROM_ALL, (9_001, 9_500), snap(101, 101));
        assert_eq!(c.floor(), 9_001);
        assert_eq!(c.next_from(t(5)), FROM_ALL);
        c.claimed(FROM_ALL, None, 2_000, snap(102, 102), t(5), t(5));
        assert_eq!(c.next_from(t(5)), 2_001, "the sweep goes on");
        c.claimed(2_001, None, 4_000, snap(103, 103), t(5), t(5));
        assert_eq!(c.next_from(t(5)), 4_001);
        // Rows found below the floor: the floor comes down to them.
        c.claimed(
            4_001,
            Some((5_000, 5_010)),
            5_010,
            snap(104, 104),
            t(5),
            t(5),
        );
        assert_eq!(c.floor(), 5_000);
        assert_eq!(c.next_from(t(5)), 5_000);
        // Past the floor, the pass goes on; once a claim reads nothing
        // more, the next starts from the floor.
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 900), snap(100, 100));
        claim(&mut c, FROM_ALL, (901, 1_000), snap(101, 101));
        assert_eq!(c.floor(), 901);
        assert_eq!(c.next_from(t(5)), FROM_ALL);
        c.claimed(FROM_ALL, None, 2_000, snap(102, 102), t(5), t(5));
        assert_eq!(c.next_from(t(5)), 2_001);
        c.pass_ended();
        assert_eq!(c.next_from(t(5)), c.floor());
    }

    /// A transaction left open holds the floor (a row below may still
    /// commit), but not the pass: spans held back are read once each, and
    /// a claim that takes rows stays where the pass is.
    #[test]
    fn a_transaction_left_open_holds_the_floor_not_the_pass() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 500), snap(50, 100));
        c.claimed(FROM_ALL, None, 2_500, snap(50, 101), t(0), t(0));
        assert_eq!(c.floor(), FROM_ALL, "transaction 50 is still open");
        assert_eq!(c.next_from(t(1)), 2_501);
        c.claimed(2_501, None, 4_500, snap(50, 102), t(1), t(1));
        assert_eq!(c.next_from(t(1)), 4_501);
        c.claimed(
            4_501,
            Some((4_600, 5_000)),
            6_500,
            snap(50, 103),
            t(1),
            t(1),
        );
        assert_eq!(c.next_from(t(1)), 4_501, "took rows: stays");
        c.released(3_000, t(2));
        assert_eq!(
            c.next_from(t(2)),
            FROM_ALL,
            "rows went back: from the floor"
        );
    }

    #[test]
    fn the_floor_waits_for_transactions_that_had_started_by_the_next_claim() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 500), snap(100, 110));
        assert_eq!(
            c.floor(),
            FROM_ALL,
            "a late commit below 500 may still appear"
        );
        // The next claim's snapshot: transactions up to 120 may hold rows below 500.
        claim(&mut c, FROM_ALL, (501, 1000), snap(105, 120));
        assert_eq!(c.floor(), FROM_ALL);
        // 110..120 still running: not yet, even though the first claim's own
        // snapshot (xmax 110) has nothing left.
        claim(&mut c, FROM_ALL, (1001, 1500), snap(115, 130));
        assert_eq!(c.floor(), FROM_ALL);
        // Everything below 120 has ended: past the first claim only.
        claim(&mut c, FROM_ALL, (1501, 2000), snap(125, 140));
        assert_eq!(c.floor(), 501);
        // Everything below 140 has ended: past the next two.
        claim(&mut c, 501, (2001, 2500), snap(140, 141));
        assert_eq!(c.floor(), 1501);
        assert_eq!(c.next_from(t(1)), 1501);
    }

    #[test]
    fn an_overlapping_claim_does_not_vouch_for_one_that_returned_after_it_started() {
        let mut c = swept(5);
        c.claimed(FROM_ALL, Some((1, 500)), 500, snap(1, 1), t(0), t(2));
        // Started at t(1), before the first returned: its snapshot may be too early.
        c.claimed(FROM_ALL, Some((501, 1000)), 1000, snap(50, 50), t(1), t(3));
        assert_eq!(c.floor(), FROM_ALL);
        c.claimed(FROM_ALL, Some((1001, 1500)), 1500, snap(60, 60), t(3), t(4));
        assert_eq!(c.floor(), 1001);
    }

    #[test]
    fn a_sweep_comes_every_interval() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 10), snap(1, 1));
        claim(&mut c, FROM_ALL, (11, 20), snap(1, 1));
        assert_eq!(c.floor(), 11);
        assert_eq!(c.next_from(t(4)), 11);
        assert_eq!(c.next_from(t(5)), FROM_ALL);
        assert_eq!(c.next_from(t(6)), 11);
    }

    #[test]
    fn rows_found_below_the_floor_bring_it_down() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 1000), snap(1, 1));
        claim(&mut c, FROM_ALL, (1001, 1100), snap(1, 1));
        assert_eq!(c.floor(), 1001);
        // A sweep finds rows another relay released: down to them...
        claim(&mut c, FROM_ALL, (40, 540), snap(9, 10));
        assert_eq!(c.floor(), 40);
        // ...and past them once the transactions started by the next claim end.
        claim(&mut c, 40, (1101, 1200), snap(10, 12));
        claim(&mut c, 40, (1201, 1300), snap(12, 12));
        assert_eq!(c.floor(), 1201);
    }

    #[test]
    fn a_claim_from_above_the_floor_vouches_for_nothing_below() {
        let mut c = swept(5);
        claim(&mut c, FROM_ALL, (1, 100), snap(1, 1));
        claim(&mut c, FROM_ALL, (101, 150), snap(1, 1));
        assert_eq!(c.floor(), 101);
        c.released(50, t(1));
        assert_eq!(c.floor(), 50);
        // Claims that had read from 101 end: they say nothing about 50..100.
        c.claimed(101, Some((151, 200)), 200, snap(5, 5), t(2), t(2));
        c.claimed(101, Some((201, 250)), 250, snap(5, 5), t(2), t(2));
        assert_eq!(c.floor(), 50);
    }

    #[test]
    fn a_claim_that_started_before_a_release_vouches_for_nothing() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(1, 1));
        claim(&mut c, FROM_ALL, (101, 150), snap(1, 1));
        assert_eq!(c.floor(), 101);
        c.released(50, t(1));
        // In flight on another pipeline while row 50 was released: it read
        // from 101, and even from lower it would have seen 50 claimed.
        c.claimed(101, Some((151, 200)), 200, snap(5, 5), t(0), t(2));
        c.claimed(50, Some((50, 50)), 50, snap(5, 5), t(2), t(3));
        c.claimed(50, Some((201, 250)), 250, snap(9, 9), t(3), t(4));
        // Only the claim that read after the release counts.
        assert_eq!(c.floor(), 51);
    }

    #[test]
    fn failed_rows_rewind_the_floor_when_due() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(1, 1));
        claim(&mut c, FROM_ALL, (101, 200), snap(1, 1));
        c.failed(7, t(30));
        assert_eq!(c.next_from(t(29)), 101);
        assert_eq!(c.next_from(t(30)), 7);
    }

    #[test]
    fn released_rows_are_claimable_at_once() {
        let mut c = swept(60);
        claim(&mut c, FROM_ALL, (1, 100), snap(1, 1));
        claim(&mut c, FROM_ALL, (101, 200), snap(1, 1));
        c.released(42, t(1));
        assert_eq!(c.next_from(t(1)), 42);
    }

    #[test]
    fn waiting_claims_are_bounded() {
        let mut c = swept(60);
        for i in 0..(MAX_WAITING as i64 * 2) {
            // A writing transaction (xid 1) never ends: nothing advances.
            claim(&mut c, FROM_ALL, (i * 10 + 1, i * 10 + 10), snap(1, 2));
        }
        assert_eq!(c.floor(), FROM_ALL);
        assert!(c.waiting.len() <= MAX_WAITING);
    }
}
