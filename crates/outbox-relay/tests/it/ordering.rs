//! Per-aggregate order (issue 12, docs/design/ordering.md §5): message k+1
//! of an aggregate is handed to the publisher only after message k is sent
//! or dead, through retries, releases, several pipelines and several
//! relays. In-process relays on a fresh schema each; the order oracle is
//! `outbox_testkit::ordering`. The buckets behind it: `src/store/tests/buckets.rs`; two
//! relays racing: `ordering_race.rs`.

use crate::support;

use outbox_relay::{
    DeadLetters, ErrorClass, Publisher, Relay, RelayConfig, ReplayTarget, RetryPolicy, Store,
};
use outbox_testkit::ordering::{
    first_deliveries_out_of_order, live_messages, sent_order_violations,
};
use outbox_testkit::TestSchema;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::scripted::{Log, Scripted};
use support::{enqueue_rows as enqueue, of};

fn config(relay_id: &str, backoff: Duration) -> RelayConfig {
    RelayConfig {
        relay_id: relay_id.to_owned(),
        concurrency: 1,
        retry: RetryPolicy {
            schedule: vec![backoff],
            jitter: 0.0,
            max_attempts: 100,
        },
        ..RelayConfig::default()
    }
}

fn relay(t: &TestSchema, p: Scripted, config: RelayConfig) -> Relay<Arc<Scripted>> {
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        Arc::new(p),
        config,
    )
    .unwrap()
}

/// The ids the publisher handed over for `agg` (aggregate id), in order.
fn delivered(log: &Log, agg: &str) -> Vec<i64> {
    let want = format!("order/{agg}");
    log.lock()
        .unwrap()
        .iter()
        .filter(|(a, _)| *a == want)
        .map(|(_, id)| *id)
        .collect()
}

/// Runs passes until the hot table holds no live row, or panics after
/// `within`; returns the passes run.
async fn drain<P: Publisher>(t: &TestSchema, r: &Relay<P>, within: Duration) -> usize {
    let start = Instant::now();
    let mut passes = 0;
    while live_messages(t).await > 0 {
        assert!(start.elapsed() < within, "not drained after {within:?}");
        passes += 1;
        if r.run_once().await.unwrap().claimed == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    passes
}

async fn row(t: &TestSchema, id: i64) -> (String, i32, Option<String>) {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT status, attempts, last_error FROM {}.all_messages WHERE id = $1",
        t.schema.quoted()
    );
    let r = client.query_one(&sql, &[&id]).await.unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn a_retried_message_is_not_overtaken() {
    let t = TestSchema::new("ord_retry").await;
    let log = Log::default();
    let ids = enqueue(&t, &of("A", 3)).await;
    let (k, k1, k2) = (ids[0], ids[1], ids[2]);
    let backoff = Duration::from_millis(1500);
    let p = Scripted::new(&t, &log).failing(k, ErrorClass::Retryable, 1);
    let r = relay(&t, p, config("r1", backoff));

    let first = r.run_once().await.unwrap();
    assert_eq!(
        (first.claimed, first.failed, first.released),
        (3, 1, 2),
        "{first:?}"
    );
    assert_eq!(row(&t, k).await.0, "failed");
    let failed_at = Instant::now();
    // Until k is due, nothing of its aggregate may go: without order, k+1
    // and k+2 (pending, attempts given back) would be claimed right away.
    let mut passes = 0;
    while failed_at.elapsed() < backoff - Duration::from_millis(400) {
        let s = r.run_once().await.unwrap();
        assert_eq!(s.claimed, 0, "pass {passes} before k is due claimed {s:?}");
        passes += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(passes >= 3, "only {passes} passes before k was due");
    assert!(delivered(&log, "A").is_empty());

    drain(&t, &r, Duration::from_secs(20)).await;
    assert_eq!(delivered(&log, "A"), vec![k, k1, k2]);
    assert_eq!(
        row(&t, k).await.1,
        2,
        "k: the failed attempt and the good one"
    );
    assert_eq!(
        row(&t, k1).await.1,
        1,
        "k+1 spent no attempt being released"
    );
    assert_eq!(
        row(&t, k2).await.1,
        1,
        "k+2 spent no attempt being released"
    );
    assert_eq!(sent_order_violations(&t).await, 0);
}

#[tokio::test]
async fn a_failure_inside_a_batch_releases_the_followers() {
    let t = TestSchema::new("ord_batch_fail").await;
    let log = Log::default();
    let rows: Vec<(String, i64)> = [
        ("B", 0),
        ("A", 0),
        ("C", 0),
        ("A", 1),
        ("B", 1),
        ("A", 2),
        ("C", 1),
    ]
    .iter()
    .map(|(a, n)| (a.to_string(), *n))
    .collect();
    let ids = enqueue(&t, &rows).await;
    let (k, k1, k2) = (ids[1], ids[3], ids[5]);
    let p = Scripted::new(&t, &log).failing(k, ErrorClass::Retryable, 1);
    let r = relay(&t, p, config("r1", Duration::from_millis(300)));

    let s = r.run_once().await.unwrap();
    assert_eq!(s.claimed, 7, "one batch carries all three of A: {s:?}");
    assert_eq!((s.marked_sent, s.failed, s.released), (4, 1, 2), "{s:?}");
    let (status, attempts, error) = row(&t, k).await;
    assert_eq!((status.as_str(), attempts), ("failed", 1));
    assert!(error.unwrap().contains("injected"));
    for id in [k1, k2] {
        let (status, attempts, error) = row(&t, id).await;
        assert_eq!((status.as_str(), attempts), ("pending", 0), "row {id}");
        let error = error.unwrap_or_default();
        assert!(error.contains("held back"), "row {id}: {error}");
    }
    for i in [0, 2, 4, 6] {
        assert_eq!(row(&t, ids[i]).await.0, "sent", "other aggregates go");
    }

    drain(&t, &r, Duration::from_secs(20)).await;
    assert_eq!(delivered(&log, "A"), vec![k, k1, k2]);
    assert_eq!(delivered(&log, "B"), vec![ids[0], ids[4]]);
    assert!(first_deliveries_out_of_order(&log.lock().unwrap()).is_empty());
    assert_eq!(sent_order_violations(&t).await, 0);
}

#[tokio::test]
async fn a_dead_message_unblocks_its_aggregate() {
    let t = TestSchema::new("ord_dead").await;
    let log = Log::default();
    let ids = enqueue(&t, &of("A", 3)).await;
    let (k, k1, k2) = (ids[0], ids[1], ids[2]);
    let p = Scripted::new(&t, &log).failing(k, ErrorClass::Permanent, u32::MAX);
    let r = relay(&t, p, config("r1", Duration::from_secs(3600)));

    let s = r.run_once().await.unwrap();
    assert_eq!((s.claimed, s.dead, s.released), (3, 1, 2), "{s:?}");
    assert_eq!(row(&t, k).await.0, "dead");
    // Dead unblocks: the next passes send the rest at once (the head, k+1,
    // first: the filter lets the released chain through from its head, so
    // k+2 may take one more claim), with nothing to wait for.
    for pass in 1..=2 {
        let s = r.run_once().await.unwrap();
        assert!(s.marked_sent >= 1, "pass {pass} sent nothing: {s:?}");
        if live_messages(&t).await == 0 {
            break;
        }
    }
    assert_eq!(delivered(&log, "A"), vec![k1, k2]);
    assert_eq!((row(&t, k1).await.1, row(&t, k2).await.1), (1, 1));
    assert_eq!(live_messages(&t).await, 0);
}

/// What replay order means. A replayed message is published after every
/// message of its aggregate already sent or in flight when it was
/// replayed. It goes before those of its aggregate still waiting once the
/// relay owning the aggregate knows of it: at once when the relay holds the
/// aggregate back itself (here: the followers of the dead message were
/// released by this relay, so its gate waits at k+1 and admits the lower
/// replayed k as the head); otherwise only after a sweep of the claim floor
/// reaches it, within `sweep_interval` (no NOTIFY on replay yet), and
/// waiting messages claimed before that sweep may go first.
#[tokio::test]
async fn replay_puts_the_message_back_at_the_head() {
    let t = TestSchema::new("ord_replay").await;
    let log = Log::default();
    let mut rows = of("A", 3);
    rows.push(("B".into(), 0));
    let ids = enqueue(&t, &rows).await;
    let (k, k1, k2) = (ids[0], ids[1], ids[2]);
    let p = Scripted::new(&t, &log).failing(k, ErrorClass::Permanent, 1);
    let r = relay(&t, p, config("r1", Duration::from_secs(3600)));

    let s = r.run_once().await.unwrap();
    assert_eq!((s.dead, s.released, s.marked_sent), (1, 2, 1), "{s:?}");
    let replayed = DeadLetters::new(r.store().clone())
        .replay(&ReplayTarget::Ids(vec![k]), Some("test"))
        .await
        .unwrap();
    assert_eq!(replayed, vec![k]);
    drain(&t, &r, Duration::from_secs(20)).await;
    assert_eq!(
        delivered(&log, "A"),
        vec![k, k1, k2],
        "the replayed k went first"
    );
    assert_eq!(sent_order_violations(&t).await, 0);
}

#[tokio::test]
async fn a_failing_aggregate_blocks_nothing_else() {
    let t = TestSchema::new("ord_blocks_nothing").await;
    let log = Log::default();
    // A's rows first, so they sit at the claim floor; then the others.
    let ids = enqueue(&t, &of("A", 5000)).await;
    let others: Vec<(String, i64)> = (0..1000)
        .map(|i| (format!("other-{}", i % 250), i))
        .collect();
    enqueue(&t, &others).await;
    let p = Scripted::new(&t, &log).failing(ids[0], ErrorClass::Retryable, u32::MAX);
    // A's head waits an hour: the clock never reaches its due time here.
    let cfg = RelayConfig {
        batch_size: 500,
        ..config("r1", Duration::from_secs(3600))
    };
    let r = relay(&t, p, cfg);
    let sent_others = || {
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent' AND aggregate_id <> 'A'")
    };
    let mut passes = 0;
    while sent_others().await < 1000 {
        passes += 1;
        assert!(passes <= 6, "the others were not all sent within 6 passes");
        r.run_once().await.unwrap();
    }
    assert_eq!(row(&t, ids[0]).await.0, "failed");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE aggregate_id = 'A' AND status = 'pending' AND attempts = 0")
            .await,
        4999,
        "A waits behind its head, no attempt spent"
    );
    assert!(delivered(&log, "A").is_empty());
    assert_eq!(sent_order_violations(&t).await, 0);
}

/// The running relay reads past a held-back backlog many claims long at
/// once, not one span per poll: with a 30 s poll interval and no
/// notifications, the other aggregates behind 20,000 rows of a blocked
/// one are sent within seconds.
#[tokio::test]
async fn a_long_blocked_backlog_is_read_past_without_waiting_for_polls() {
    let t = TestSchema::new("ord_read_past").await;
    let log = Log::default();
    let ids = enqueue(&t, &of("A", 20_000)).await;
    let others: Vec<(String, i64)> = (0..500).map(|i| (format!("o-{}", i % 50), i)).collect();
    enqueue(&t, &others).await;
    let p = Scripted::new(&t, &log).failing(ids[0], ErrorClass::Retryable, u32::MAX);
    let cfg = RelayConfig {
        batch_size: 100,
        notify: false,
        idle_sleep: Duration::from_secs(30),
        ..config("r1", Duration::from_secs(3600))
    };
    let r = Arc::new(relay(&t, p, cfg));
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn({
        let (r, stop) = (r.clone(), stop.clone());
        async move { r.run(stop).await }
    });
    let start = Instant::now();
    let sent_others = || {
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent' AND aggregate_id <> 'A'")
    };
    while sent_others().await < 500 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "others not sent after 20 s: the relay waited for polls"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    run.await.unwrap().unwrap();
    assert!(delivered(&log, "A").is_empty(), "A waits behind its head");
    assert_eq!(sent_order_violations(&t).await, 0);
}

/// Messages a relay knows as live (a failed head, and the followers its
/// settle released) that leave the table behind its back stop holding the
/// aggregate back within a sweep interval: sent by the relay their bucket
/// had passed to, or deleted by an operator. Before, only the failed head
/// was checked; the released followers, gone, held the aggregate back for
/// good, each later message claimed and released as "held back" over and
/// over (what stalled `fault_ordering` once).
#[tokio::test]
async fn known_messages_gone_elsewhere_stop_holding_back() {
    let t = TestSchema::new("ord_gone").await;
    let log = Log::default();
    let ids = enqueue(&t, &of("A", 3)).await;
    let p = Scripted::new(&t, &log).failing(ids[0], ErrorClass::Retryable, 1);
    let cfg = RelayConfig {
        sweep_interval: Duration::from_millis(300),
        ..config("r1", Duration::from_secs(3600))
    };
    let r = relay(&t, p, cfg);
    let s = r.run_once().await.unwrap();
    assert_eq!((s.failed, s.released), (1, 2), "{s:?}");
    let client = t.pool.get().await.unwrap();
    let gone = format!(
        "DELETE FROM {}.messages WHERE id = ANY($1)",
        t.schema.quoted()
    );
    assert_eq!(client.execute(&gone, &[&ids]).await.unwrap(), 3);
    let later = enqueue(&t, &[("A".to_owned(), 3)]).await[0];
    drain(&t, &r, Duration::from_secs(10)).await;
    assert_eq!(delivered(&log, "A"), vec![later]);
}
