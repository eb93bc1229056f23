//! Per-aggregate order under the §4.5 race (docs/design/ordering.md): two
//! relays in process, four pipelines each, random failures, a relay paused,
//! stopped and started again while buckets move; and the same race without
//! order as the negative control. Single-relay scenarios: `ordering.rs`.

use crate::support;

use outbox_relay::relay::Ordering;
use outbox_relay::{Relay, RelayConfig, RetryPolicy, Store};
use outbox_testkit::ordering::{
    first_deliveries_out_of_order, live_messages, sent_order_violations,
};
use outbox_testkit::TestSchema;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::enqueue_rows as enqueue;
use support::scripted::{splitmix, Log, Scripted};
use tokio_util::sync::CancellationToken;

struct Race {
    /// Kept until the asserts ran: a failing test leaves it for inspection.
    _t: TestSchema,
    violations: i64,
    out_of_order: Vec<String>,
    elapsed: Duration,
}

/// 20,000 rows over 200 aggregates in runs of 5 consecutive ids, two
/// relays with 4 pipelines each and a 1 s bucket lease, batch 50, 15 % of
/// attempts failing retryably (seeded) with a 20 ms backoff. Relay a is
/// paused (its publisher hangs) then stopped a third of the way through, so
/// relay b takes its buckets, and started again later, so buckets move
/// back.
async fn race(ordering: Ordering) -> Race {
    const AGGS: u64 = 200;
    const RUNS: u64 = 4000;
    const SEED: u64 = 0x0bde_4f12;
    let t = TestSchema::new("ord_race").await;
    let rows: Vec<(String, i64)> = (0..RUNS)
        .flat_map(|r| {
            let agg = format!("agg-{}", splitmix(SEED ^ r) % AGGS);
            (0..5).map(move |i| (agg.clone(), (r * 5 + i) as i64))
        })
        .collect();
    enqueue(&t, &rows).await;
    let log = Log::default();
    let publisher = || {
        let mut p = Scripted::new(&t, &log);
        p.random = Some((SEED, 15));
        Arc::new(p)
    };
    let cfg = |id: &str| RelayConfig {
        relay_id: id.to_owned(),
        batch_size: 50,
        concurrency: 4,
        bucket_lease: Duration::from_secs(1),
        idle_sleep: Duration::from_millis(20),
        notify: false,
        sweep_interval: Duration::from_millis(500),
        shutdown_grace: Duration::from_millis(200),
        retry: RetryPolicy {
            schedule: vec![Duration::from_millis(20)],
            jitter: 0.0,
            max_attempts: 1000,
        },
        ordering,
        ..RelayConfig::default()
    };
    let start = |id: &str, p: Arc<Scripted>| {
        let store = Store::new(outbox_testkit::pool(8), t.schema.clone());
        let r = Arc::new(Relay::new(store, p, cfg(id)).unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        (stop, task)
    };
    let began = Instant::now();
    let sent = || t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'");
    let wait_sent = |n: i64| async move {
        while sent().await < n {
            assert!(
                began.elapsed() < Duration::from_secs(240),
                "stuck below {n} sent"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let pa = publisher();
    let (stop_a, task_a) = start("relay-a", pa.clone());
    let (stop_b, task_b) = start("relay-b", publisher());

    wait_sent(6000).await;
    // Pause relay a with batches in flight, then stop it: its claims are
    // released at the end of the grace and its buckets freed, and b takes
    // them over at its next heartbeat.
    pa.hang.store(true, AtomicOrdering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_a.cancel();
    task_a.await.unwrap().unwrap();
    let at = sent().await;
    wait_sent(at + 3000).await;
    // A new incarnation of a: b gives buckets back to it.
    let (stop_a, task_a) = start("relay-a", publisher());
    while live_messages(&t).await > 0 {
        assert!(began.elapsed() < Duration::from_secs(240), "not drained");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = began.elapsed();
    stop_a.cancel();
    stop_b.cancel();
    task_a.await.unwrap().unwrap();
    task_b.await.unwrap().unwrap();

    assert_eq!(sent().await, 20_000, "every message sent, none dead");
    // Each message reached the sink once (a batch caught mid-insert by the
    // stop could repeat, at most one batch per pipeline of a).
    let published = t
        .count("SELECT count(*) FROM {schema}.published_events")
        .await;
    let distinct = t
        .count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
        .await;
    assert_eq!(distinct, 20_000);
    assert!(published - distinct <= 4 * 50, "{published} published");
    let retried = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent' AND attempts > 1")
        .await;
    assert!(retried > 1000, "failures were exercised: {retried} retried");
    let shared = t
        .count(
            "SELECT count(*) FROM (SELECT aggregate_id FROM {schema}.messages_sent \
              GROUP BY 1 HAVING count(DISTINCT locked_by) > 1) x",
        )
        .await;
    assert!(shared > 0, "buckets moved between the relays");
    let log = log.lock().unwrap().clone();
    Race {
        violations: sent_order_violations(&t).await,
        out_of_order: first_deliveries_out_of_order(&log),
        elapsed,
        _t: t,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_in_process_never_interleave_an_aggregate() {
    let r = race(Ordering::Aggregate).await;
    eprintln!("ordered race drained in {:?}", r.elapsed);
    assert_eq!(r.violations, 0, "§4.5 oracle on messages_sent");
    assert!(
        r.out_of_order.is_empty(),
        "first deliveries out of order: {:?}",
        r.out_of_order
    );
}

/// The negative control: the same race without order shows violations,
/// so the oracle can fail and `none` really is unordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_none_is_today() {
    let r = race(Ordering::None).await;
    eprintln!(
        "unordered race drained in {:?}: {} violations",
        r.elapsed, r.violations
    );
    assert!(
        r.violations > 0,
        "the oracle found no violation without order"
    );
    assert!(
        !r.out_of_order.is_empty(),
        "first deliveries all in order without order"
    );
}
