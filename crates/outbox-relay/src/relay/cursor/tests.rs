//! The claim cursor's bookkeeping, claim by claim (no SQL: snapshots and
//! ids given by hand).

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
/// Once every transaction that was running when the pass began has
/// ended, one claim reads from the floor (and says so: it should follow
/// at once); then the pass goes on where it was.
#[test]
fn a_pass_looks_back_once_the_transactions_running_when_it_began_have_ended() {
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
    // Everything below 15 has ended, but the pass has only begun: it
    // goes on a little (see LOOK_BACK_EVERY).
    assert!(!c.claimed(331, Some((331, 340)), 340, snap(15, 18), t(0), t(0)));
    assert_eq!(c.next_from(t(0)), 331);
    // A second on: one claim looks back from the floor.
    assert!(c.claimed(331, Some((341, 350)), 350, snap(18, 19), t(1), t(1)));
    let from = c.next_from(t(1));
    assert!(from <= 150, "the next claim reads from {from}");
    // It takes row 150 (and reads no further than 250 here); the pass
    // goes on where it was.
    assert!(!c.claimed(from, Some((150, 150)), 250, snap(19, 20), t(1), t(1)));
    assert_eq!(c.next_from(t(1)), 331);
    // The next look back comes no sooner than LOOK_BACK_EVERY.
    assert!(!c.claimed(331, None, 400, snap(20, 21), t(1), t(1)));
    assert!(!c.claimed(401, None, 500, snap(22, 23), t(1), t(1)));
    assert_eq!(c.next_from(t(1)), 501);
    assert!(c.claimed(501, None, 600, snap(24, 25), t(2), t(2)));
    assert_eq!(c.next_from(t(2)), c.floor());
    assert_eq!(c.next_from(t(2)), 601);
}

/// A sweep's pass walks the spans below the floor however quickly
/// transactions end: it is there to find rows put back below the floor
/// behind a long backlog held back. Past the floor it looks back as any
/// pass.
#[test]
fn a_sweep_walks_up_to_the_floor_while_transactions_end() {
    let mut c = swept(5);
    claim(&mut c, FROM_ALL, (1, 9_000), snap(100, 100));
    claim(&mut c, FROM_ALL, (9_001, 9_500), snap(101, 101));
    assert_eq!(c.floor(), 9_001);
    assert_eq!(c.next_from(t(5)), FROM_ALL);
    let mut xid = 102;
    for from in (1..9_000).step_by(2_000) {
        let from = if from == 1 { FROM_ALL } else { from };
        let upto = if from == FROM_ALL {
            2_000
        } else {
            from + 1_999
        };
        // 100 ms after the last each: time enough for a look back.
        let at = t(5) + chrono::TimeDelta::milliseconds(upto / 20);
        assert!(!c.claimed(from, None, upto, snap(xid, xid + 1), at, at));
        xid += 2;
        assert_eq!(c.next_from(at), upto + 1, "the sweep goes on");
    }
    // Read past the floor: a look back.
    let at = t(5) + chrono::TimeDelta::milliseconds(600);
    assert!(c.claimed(10_001, None, 12_000, snap(xid, xid + 1), at, at));
    assert_eq!(c.next_from(at), c.floor());
    assert_eq!(c.next_from(at), 12_001);
}

/// A transaction left open brings no look back: the pass goes on
/// reading past spans held back, as before.
#[test]
fn a_pass_goes_on_while_a_transaction_that_was_running_stays_open() {
    let mut c = swept(60);
    claim(&mut c, FROM_ALL, (1, 100), snap(10, 10));
    c.claimed(FROM_ALL, None, 1_000, snap(10, 20), t(0), t(0));
    for (i, from) in (1_001..10_000).step_by(1_000).enumerate() {
        let i = i as i64;
        // A second apart: only the open transaction holds it back.
        let look_back = c.claimed(from, None, from + 999, snap(10, 21 + i), t(i), t(i));
        assert!(!look_back, "transaction 10 is open");
        assert_eq!(c.next_from(t(i)), from + 1_000);
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
