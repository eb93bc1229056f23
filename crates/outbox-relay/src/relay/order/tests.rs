//! The gates' rules, one race or takeover at a time.

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
    // goes on from 3, not from whatever a claim finds next; and the
    // floor goes back past the chain, since the filter passed over
    // rows of it that may lie between 2 and 3.
    g.claiming();
    assert_eq!(g.open(A, 2), Some(3));
    assert_eq!(g.gate(A), Some(Gate::From(3)));
    // Released, hence claimable: no filter, the claim brings them in
    // id order (a claim without 3 stops below it, see admit).
    assert!(g.held().is_empty());
    g.claiming();
    assert_eq!(g.admit(&[(5, A)]).rejected, vec![5]);
    // Its next chain is held back in SQL from the start.
    g.claiming();
    g.admit(&[(3, A), (5, A)]);
    assert_eq!(
        g.gate(A),
        Some(Gate::Closed {
            last: 5,
            hot: true,
            resume: None
        })
    );
    // A claim filters it while hot; sent: the floor goes back past the
    // chain, where the filter skipped.
    assert_eq!(g.held(), vec![(A, i64::MIN)]);
    assert_eq!(g.open(A, 5), Some(6));
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
    // Both live, both brought, in order: one chain.
    assert!(g.admit(&[(3, A), (5, A)]).rejected.is_empty());
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
    g.hold(A, 1, true);
    assert_eq!(g.held(), vec![(A, 1)]);
    // A claim that started before the hold brings 2 and 3: too early.
    assert_eq!(g.admit(&[(2, A), (3, A)]).rejected, vec![2, 3]);
    // The head, when due, is admitted alone; 2 and 3 stay known.
    assert!(g.admit(&[(1, A)]).rejected.is_empty());
    assert_eq!(
        g.gate(A),
        Some(Gate::Closed {
            last: 1,
            hot: false,
            resume: Some(2)
        })
    );
    // Filtered while waiting: the floor goes back past the head, where
    // 2 and 3 lie.
    assert_eq!(g.open(A, 1), Some(2));
    assert_eq!(g.gate(A), Some(Gate::From(2)));
    g.claiming();
    assert!(g.admit(&[(2, A), (3, A)]).rejected.is_empty());
    assert_eq!(g.open(A, 3), None, "not filtered since");
}

#[test]
fn a_lower_unknown_message_is_admitted_up_to_the_known_head() {
    let mut g = Gates::default();
    g.hold(A, 5, true);
    // 5 is brought, so nothing known is passed: one chain.
    assert!(g.admit(&[(2, A), (5, A), (6, A)]).rejected.is_empty());
    g.open(A, 6);
    assert_eq!(g.gate(A), None);
    // Without 5, the chain stops below it.
    g.hold(A, 5, true);
    g.claiming();
    assert_eq!(g.admit(&[(2, A), (6, A)]).rejected, vec![6]);
    assert_eq!(
        g.gate(A),
        Some(Gate::Closed {
            last: 2,
            hot: false,
            resume: Some(5)
        })
    );
    g.open(A, 2);
    assert_eq!(g.gate(A), Some(Gate::From(5)));
    g.claiming();
    assert!(g.admit(&[(5, A), (6, A)]).rejected.is_empty());
    g.open(A, 6);
    // Only a lower one: the known head waits again once it is done.
    g.hold(A, 5, true);
    g.claiming();
    assert!(g.admit(&[(3, A)]).rejected.is_empty());
    assert_eq!(g.open(A, 3), None);
    assert_eq!(g.gate(A), Some(Gate::From(5)));
}

/// The hole a reaped (or replayed) lower message opened when a gate
/// held one id only: going back to it forgot the head above.
#[test]
fn going_back_to_a_lower_message_keeps_the_head_above() {
    let mut g = Gates::default();
    g.hold(A, 9, true);
    g.reaped(A, 4);
    assert_eq!(g.gate(A), Some(Gate::From(4)));
    // A chain of ours whose lease ran out: reaped, it no longer blocks.
    let mut h = Gates::default();
    h.admit(&[(1, B), (2, B)]);
    h.reaped(B, 1);
    h.reaped(B, 2);
    assert_eq!(h.gate(B), Some(Gate::From(1)));
    // 9 waits for its retry (not brought): nothing passes it.
    g.claiming();
    assert_eq!(g.admit(&[(4, A), (6, A), (12, A)]).rejected, vec![12]);
    g.claiming();
    assert_eq!(g.open(A, 6), None);
    assert_eq!(g.gate(A), Some(Gate::From(9)), "9 was never forgotten");
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

/// The head of `key` as the periodic check reads it.
fn head(g: &Gates, key: i64) -> Head {
    *g.heads().iter().find(|h| h.key == key).expect("a head")
}

#[test]
fn a_head_settled_elsewhere_moves_or_opens_the_gate() {
    let mut g = Gates::default();
    g.load(&[(B, 7), (A, 3)]);
    assert_eq!(g.moved(head(&g, B), Some(7)), None);
    assert_eq!(g.gate(B), Some(Gate::From(7)));
    g.moved(head(&g, B), Some(9));
    assert_eq!(g.gate(B), Some(Gate::From(9)));
    g.held();
    assert_eq!(g.moved(head(&g, B), None), Some(10));
    assert_eq!(g.gate(B), None);
    // A stale answer (the gate changed meanwhile) is ignored.
    let read = head(&g, A);
    g.admit(&[(3, A)]);
    assert_eq!(g.moved(read, None), None);
    assert_eq!(
        g.gate(A),
        Some(Gate::Closed {
            last: 3,
            hot: false,
            resume: None
        })
    );
    // So is one read before a change that left the same head.
    g.hold(A, 3, true);
    let read = head(&g, A);
    g.hold(A, 5, false);
    assert_eq!(g.moved(read, Some(8)), None);
    assert_eq!(g.gate(A), Some(Gate::From(3)));
}

/// The stall `fault_ordering` met: a chain in flight when its bucket
/// passed to another relay settles here with a failed head and the
/// rest released. The other relay sends them all; when the bucket comes
/// back, the released ones must not hold the aggregate back for good.
#[test]
fn released_messages_another_relay_sent_stop_holding_back() {
    let mut g = Gates::default();
    g.admit(&[(1, A), (2, A), (3, A)]);
    g.forget(|_| false); // the bucket went to another relay
    g.hold(A, 1, true);
    g.hold(A, 2, false);
    g.hold(A, 3, false);
    // The other relay sent 1 to 3; the bucket is back, nothing held.
    g.load(&[]);
    g.claiming();
    assert_eq!(g.admit(&[(4, A)]).rejected, vec![4], "1 is still known");
    // The check finds 4 the lowest live one: 1, 2 and 3 are gone.
    assert_eq!(head(&g, A).was, 1);
    g.moved(head(&g, A), Some(4));
    assert_eq!(g.gate(A), Some(Gate::From(4)));
    g.claiming();
    assert!(g.admit(&[(4, A), (5, A)]).rejected.is_empty());
    // Nothing live at all: the gate is dropped.
    let mut g = Gates::default();
    g.hold(A, 2, false);
    g.hold(A, 3, false);
    assert_eq!(head(&g, A).was, 2, "released messages are checked too");
    g.moved(head(&g, A), None);
    assert_eq!(g.gate(A), None);
}
