//! The settle plan, row by row (no database: batches and outcomes given by
//! hand, the retry times read off a policy without jitter).

use super::*;
use crate::relay::publish::EarlySent;
use crate::store::Lease;
use crate::{Message, Payload};
use std::collections::HashMap;
use std::time::Duration;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn after(secs: u64) -> DateTime<Utc> {
    saturating_add_std(now(), Duration::from_secs(secs))
}

/// 1s, 5s, 30s; 3 attempts; no jitter, so retry times are exact.
fn policy() -> RetryPolicy {
    RetryPolicy {
        schedule: [1, 5, 30].map(Duration::from_secs).to_vec(),
        jitter: 0.0,
        max_attempts: 3,
    }
}

fn message(id: i64, attempts: i32) -> Message {
    Message {
        id,
        event_id: uuid::Uuid::nil(),
        event_type: "t".into(),
        event_version: 1,
        aggregate_type: "order".into(),
        aggregate_id: "1".into(),
        topic: "orders".into(),
        payload: Payload::from_json("{}").unwrap(),
        headers: Default::default(),
        attempts,
        created_at: now(),
    }
}

fn retry(why: &str) -> Outcome {
    Err(PublishError::retryable(why))
}

fn permanent(why: &str) -> Outcome {
    Err(PublishError::permanent(why))
}

/// A published batch of `(id, attempts, outcome)`, ordering off.
fn batch(rows: Vec<(i64, i32, Outcome)>) -> PublishedBatch {
    PublishedBatch {
        lease: Some(Lease {
            relay_id: "r".into(),
            locked_at: now(),
        }),
        messages: rows.iter().map(|(id, a, _)| message(*id, *a)).collect(),
        outcomes: Some(rows.into_iter().map(|r| r.2).collect()),
        ..PublishedBatch::default()
    }
}

/// As [`batch`], ordering on: `keys` gives each id its aggregate.
fn ordered(rows: Vec<(i64, i32, Outcome)>, keys: &[(i64, i64)]) -> PublishedBatch {
    PublishedBatch {
        keys: keys.iter().copied().collect::<HashMap<_, _>>(),
        ..batch(rows)
    }
}

fn plan(b: PublishedBatch) -> SettlePlan {
    plan_with(b, None)
}

fn plan_with(b: PublishedBatch, unreachable: Option<&str>) -> SettlePlan {
    SettlePlan::new(
        b,
        &policy(),
        now(),
        unreachable.map(str::to_owned),
        &mut rand::thread_rng(),
    )
}

#[test]
fn accepted_rows_are_sent_and_their_chains_open_at_the_last_id() {
    let p = plan(ordered(
        vec![(1, 1, Ok(())), (2, 1, Ok(())), (3, 1, Ok(()))],
        &[(1, 10), (2, 20), (3, 10)],
    ));
    assert_eq!(p.params.sent, [1, 2, 3]);
    assert!(p.params.failed.is_empty() && p.params.dead.is_empty());
    assert!(p.params.released.is_empty());
    assert_eq!(p.open, [(10, 3), (20, 2)]);
    assert!(p.hold.is_empty());
    assert_eq!(p.hold_on_doubt, [(10, 1), (20, 2)]);
    assert_eq!(p.order_breaks, 0);
    assert_eq!((p.stats.claimed, p.stats.published), (3, 3));
    assert_eq!(p.stats.aggregates, 2);
}

#[test]
fn a_retryable_failure_is_failed_with_the_policys_backoff() {
    let p = plan(batch(vec![(1, 1, retry("busy")), (2, 2, retry("busy"))]));
    assert_eq!(
        p.params.failed,
        [(1, "busy".into(), after(1)), (2, "busy".into(), after(5))]
    );
    assert!(p.params.sent.is_empty() && p.params.dead.is_empty());
    assert_eq!(p.stats.published, 0);
}

#[test]
fn retry_after_pushes_the_retry_back_up_to_the_longest_step() {
    let later = |secs| {
        Err(PublishError {
            retry_after: Some(Duration::from_secs(secs)),
            ..PublishError::retryable("slow down")
        })
    };
    let p = plan(batch(vec![
        (1, 1, later(20)),
        // Shorter than the backoff: the backoff wins.
        (2, 2, later(2)),
        // Absurdly long: capped at the longest step, no overflow.
        (3, 1, later(9_000_000_000_000)),
    ]));
    let at: Vec<_> = p.params.failed.iter().map(|f| (f.0, f.2)).collect();
    assert_eq!(at, [(1, after(20)), (2, after(5)), (3, after(30))]);
}

#[test]
fn a_retryable_failure_at_max_attempts_goes_dead() {
    let p = plan(batch(vec![(1, 3, retry("busy")), (2, 2, retry("busy"))]));
    assert_eq!(
        p.params.dead,
        [(1, "max attempts (3) reached: busy".to_owned())]
    );
    assert_eq!(p.params.failed.len(), 1);
    assert_eq!(p.params.failed[0].0, 2);
}

#[test]
fn a_permanent_failure_goes_dead_at_once_and_ends_its_chain() {
    let p = plan(ordered(
        vec![(1, 1, permanent("bad payload")), (2, 1, Ok(()))],
        &[(1, 10), (2, 10)],
    ));
    assert_eq!(p.params.dead, [(1, "permanent: bad payload".to_owned())]);
    // Dead is over: the chain goes on, and row 2 was published after it.
    assert_eq!(p.params.sent, [2]);
    assert_eq!(p.open, [(10, 2)]);
    assert!(p.hold.is_empty());
    // The destination accepted 2 after refusing 1 of the same aggregate.
    assert_eq!(p.order_breaks, 1);
}

#[test]
fn with_the_destination_down_retryable_failures_are_released_without_an_attempt() {
    let b = ordered(
        vec![
            (1, 1, retry("refused")),
            // Even at max attempts: an outage never pushes into dead.
            (2, 3, retry("refused")),
            (3, 1, permanent("bad")),
            (4, 1, Ok(())),
        ],
        &[(1, 10), (2, 20), (3, 30), (4, 40)],
    );
    assert!(asks_destination(&b));
    let p = plan_with(b, Some("connection refused"));
    assert_eq!(p.params.released, [1, 2]);
    assert_eq!(
        p.params.release_reason,
        "destination unreachable: connection refused"
    );
    assert!(p.params.failed.is_empty());
    assert_eq!(p.params.dead, [(3, "permanent: bad".to_owned())]);
    assert_eq!(p.params.sent, [4]);
    // Released rows are claimable at once: held, not waiting.
    assert_eq!(p.hold, [(10, 1, false), (20, 2, false)]);
    assert_eq!(p.open, [(30, 3), (40, 4)]);
}

#[test]
fn an_abandoned_publication_releases_the_batch_except_what_was_sent_early() {
    let mut b = ordered(vec![(1, 1, Ok(())), (2, 1, Ok(())), (3, 5, Ok(()))], &[]);
    b.outcomes = None;
    b.early = EarlySent {
        ids: [2].into(),
        lost: false,
    };
    assert!(!asks_destination(&b), "nobody is asked at shutdown");
    let p = plan_with(b, Some("not used"));
    assert_eq!(p.params.released, [1, 3]);
    assert_eq!(p.params.release_reason, AT_SHUTDOWN);
    assert!(p.params.sent.is_empty(), "2 is marked sent already");
    assert_eq!(p.early_sent, 1);
    assert!(p.params.dead.is_empty() && p.params.failed.is_empty());
    assert_eq!((p.stats.claimed, p.stats.published), (3, 1));
}

#[test]
fn rows_sent_early_count_as_sent_whatever_the_publish_said_after() {
    let mut b = ordered(
        vec![(1, 1, retry("timed out")), (2, 1, retry("timed out"))],
        &[(1, 10), (2, 10)],
    );
    b.early = EarlySent {
        ids: [1].into(),
        lost: true,
    };
    let p = plan(b);
    assert!(p.params.sent.is_empty());
    assert_eq!(p.early_sent, 1);
    assert!(p.early_lost);
    assert_eq!(p.params.failed, [(2, "timed out".into(), after(1))]);
    assert_eq!(p.hold, [(10, 2, true)]);
    assert!(p.open.is_empty());
    // Only rows this statement settles place a chain's start.
    assert_eq!(p.hold_on_doubt, [(10, 2)]);
}

#[test]
fn only_rows_sent_early_failing_does_not_ask_the_destination() {
    let mut b = batch(vec![(1, 1, retry("timed out")), (2, 1, Ok(()))]);
    b.early.ids = [1].into();
    assert!(!asks_destination(&b));
    assert!(!asks_destination(&batch(vec![(1, 1, permanent("bad"))])));
    assert!(asks_destination(&batch(vec![(1, 1, retry("busy"))])));
}

#[test]
fn after_a_message_not_sent_the_rest_of_its_aggregate_is_released() {
    let p = plan(ordered(
        vec![
            (1, 1, retry("busy")),
            (2, 1, Ok(())),
            (3, 1, retry("busy")),
            (4, 1, permanent("bad")),
            (5, 1, Ok(())),
        ],
        &[(1, 10), (2, 20), (3, 10), (4, 10), (5, 10)],
    ));
    assert_eq!(p.params.failed, [(1, "busy".into(), after(1))]);
    // Behind 1: released, no attempt spent, not dead even when permanent.
    assert_eq!(p.params.released, [3, 4]);
    assert_eq!(p.params.release_reason, BEHIND_UNSENT);
    assert!(p.params.dead.is_empty());
    // 5 was accepted anyway (a pipelined publisher): it stays sent.
    assert_eq!(p.params.sent, [2, 5]);
    assert_eq!(p.order_breaks, 1);
    assert_eq!(p.hold, [(10, 1, true), (10, 3, false), (10, 4, false)]);
    assert_eq!(p.open, [(20, 2)]);
    assert_eq!(p.hold_on_doubt, [(10, 1), (20, 2)]);
}

#[test]
fn rows_are_settled_in_id_order_whatever_the_publish_order() {
    let p = plan(ordered(
        vec![(3, 1, Ok(())), (1, 1, retry("busy"))],
        &[(1, 10), (3, 10)],
    ));
    // 1 comes first in its chain, so 3 went out of order.
    assert_eq!(p.order_breaks, 1);
    assert_eq!(p.params.sent, [3]);
    assert_eq!(p.open, Vec::<(i64, i64)>::new());
}

#[test]
fn without_ordering_a_failure_holds_nothing_back() {
    let p = plan(batch(vec![(1, 1, retry("busy")), (2, 1, Ok(()))]));
    assert_eq!(p.params.sent, [2]);
    assert!(p.params.released.is_empty());
    assert!(p.hold.is_empty() && p.open.is_empty() && p.hold_on_doubt.is_empty());
    assert_eq!(p.order_breaks, 0);
    assert_eq!(p.stats.aggregates, 0);
}

#[test]
fn rows_held_back_by_the_claim_are_released_as_such() {
    let mut b = ordered(vec![(1, 1, Ok(()))], &[(1, 10), (2, 20)]);
    b.held_back = vec![2];
    let p = plan(b);
    assert_eq!(p.params.released, [2]);
    assert_eq!(p.params.release_reason, HELD_BACK);
    assert_eq!(p.params.sent, [1]);
    assert_eq!((p.stats.claimed, p.stats.held_back), (2, 1));
    // Not part of any chain of this batch: the gates learn nothing of it.
    assert_eq!(p.open, [(10, 1)]);
    assert_eq!(p.hold_on_doubt, [(10, 1)]);
}

#[test]
fn unloadable_rows_count_as_dead_and_close_their_chain() {
    let mut b = ordered(vec![(2, 1, Ok(()))], &[(1, 10), (2, 10), (3, 30)]);
    b.unloadable = vec![1, 3];
    let p = plan(b);
    assert_eq!((p.stats.failed, p.stats.dead, p.stats.claimed), (2, 2, 3));
    // Settled dead before publishing: not in this statement.
    assert!(p.params.dead.is_empty());
    assert_eq!(p.open, [(10, 2), (30, 3)]);
    assert_eq!(p.hold_on_doubt, [(10, 1), (30, 3)]);
}

#[test]
fn rows_that_could_not_be_dead_lettered_fail_to_be_retried() {
    let mut b = ordered(vec![(2, 1, Ok(()))], &[(1, 10), (2, 10)]);
    b.not_dead_lettered = vec![(1, "could not dead-letter".into())];
    assert!(asks_destination(&b));
    let p = plan(b);
    // Never attempted: the first step of the schedule.
    assert_eq!(
        p.params.failed,
        [(1, "could not dead-letter".into(), after(1))]
    );
    // 2 was published after it, as with any failure before it.
    assert_eq!(p.params.sent, [2]);
    assert_eq!(p.order_breaks, 1);
    assert_eq!(p.hold, [(10, 1, true)]);
}

#[test]
fn a_batch_with_nothing_claimed_plans_nothing() {
    let p = plan(PublishedBatch {
        outcomes: Some(Vec::new()),
        read_on: true,
        ..PublishedBatch::default()
    });
    assert!(p.params.sent.is_empty() && p.params.released.is_empty());
    assert!(p.hold.is_empty() && p.open.is_empty());
    assert_eq!(p.stats.claimed, 0);
    assert!(p.stats.read_on);
}

#[test]
fn the_jitter_spreads_retry_times_within_its_bounds() {
    let spread = RetryPolicy {
        jitter: 0.5,
        ..policy()
    };
    for _ in 0..100 {
        let p = SettlePlan::new(
            batch(vec![(1, 3 - 1, retry("busy"))]),
            &spread,
            now(),
            None,
            &mut rand::thread_rng(),
        );
        let at = p.params.failed[0].2;
        assert!(
            at >= after(5) - chrono::Duration::milliseconds(2500)
                && at <= after(5) + chrono::Duration::milliseconds(2500),
            "{at}"
        );
    }
}
