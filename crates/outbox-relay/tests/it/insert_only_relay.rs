//! The relay over the insert-only engine's draft (docs/design/insert-only.md,
//! phase 2), on the real PostgreSQL: lanes drained in order with no message
//! row written, the rare path through `retries`, a relay killed and its
//! lanes taken over, the idle cost, one pass, the backlog. The schema and
//! its statements by hand: `insert_only_draft.rs`.

use crate::insert_only_draft::{sql, upgraded};
use outbox_testkit::TestSchema;

/// Every message row as written: `(id, ctid, xmin)`. An UPDATE gives a row
/// a new version (another ctid and xmin), a DELETE takes it away: the same
/// answer before and after a drain means the relay wrote no message row.
async fn row_versions(t: &TestSchema) -> Vec<(i64, String, String)> {
    let c = t.pool.get().await.unwrap();
    c.query(
        &sql(
            t,
            "SELECT id, ctid::text, xmin::text FROM {schema}.messages ORDER BY id",
        ),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Waits until `done` (a query answering one int8) is not 0, checked
/// every 20 ms; after 60 s, fails showing the states, the lanes and their
/// owners.
async fn wait_for(t: &TestSchema, done: &str) {
    use std::time::{Duration, Instant};
    let began = Instant::now();
    while t.count(done).await == 0 {
        if began.elapsed() > Duration::from_secs(60) {
            let c = t.pool.get().await.unwrap();
            let seen: Vec<String> = c
                .query(
                    &sql(
                        t,
                        "SELECT status || ':' || count(*) FROM {schema}.all_messages GROUP BY status \
                         UNION ALL SELECT 'lane ' || lane || ': ' || max(seq) || ' last ' || max(last_id) \
                           FROM {schema}.lane_positions GROUP BY lane \
                         UNION ALL SELECT 'bucket ' || bucket || ': ' || coalesce(owner, '-') \
                           FROM {schema}.relay_buckets WHERE bucket < 4",
                    ),
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            panic!("not within 60 s: {done}; seen {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lane_config() -> outbox_relay::RelayConfig {
    outbox_relay::RelayConfig {
        batch_size: 50,
        notify: false,
        idle_sleep: std::time::Duration::from_millis(20),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_relay_drains_the_lanes_in_order_and_writes_no_message_row() {
    use crate::support::scripted::{Log, Scripted};
    let t = upgraded("io_relay").await;
    // 20 aggregates, 30 messages each, interleaved.
    let rows: Vec<(String, i64)> = (0..30)
        .flat_map(|n| (0..20).map(move |a| (format!("agg-{a}"), n)))
        .collect();
    let ids = crate::support::enqueue_rows(&t, &rows).await;
    // The third message of agg-7 fails once, retryably: it goes to
    // `retries` failed, and every later message of agg-7 pending behind it
    // (in the same batch, or held in later ones), while the rest is sent;
    // at its retry the claim path sends it and the rest of agg-7 in order.
    let failing = ids[2 * 20 + 7];
    let agg7: Vec<i64> = (2..30).map(|n| ids[n * 20 + 7]).collect();
    let before = row_versions(&t).await;
    let log = Log::default();
    let publisher =
        Scripted::new(&t, &log).failing(failing, outbox_relay::ErrorClass::Retryable, 1);
    let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
    let config = outbox_relay::RelayConfig {
        retry: outbox_relay::RetryPolicy {
            schedule: vec![std::time::Duration::from_secs(3)],
            jitter: 0.0,
            max_attempts: 5,
        },
        ..lane_config()
    };
    let relay = outbox_relay::Relay::new(store, publisher, config).unwrap();
    let c = t.pool.get().await.unwrap();
    let states = "SELECT status || ':' || count(*) FROM {schema}.all_messages \
                  GROUP BY status ORDER BY status";
    let stop = tokio_util::sync::CancellationToken::new();
    let check = async {
        // First the hot path: everything but agg-7's tail sent, the tail
        // in `retries` behind its failed head.
        wait_for(
            &t,
            "SELECT (count(*) FILTER (WHERE status = 'sent') = 572 \
                     AND (SELECT count(*) FROM {schema}.retries) = 28)::int::int8 \
               FROM {schema}.all_messages",
        )
        .await;
        let got: Vec<String> = c
            .query(&sql(&t, states), &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(got, ["failed:1", "pending:27", "sent:572"]);
        let retries: Vec<(i64, String)> = c
            .query(
                &sql(&t, "SELECT id, status FROM {schema}.retries ORDER BY id"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(retries.iter().map(|r| r.0).collect::<Vec<_>>(), agg7);
        assert_eq!(retries[0].1, "failed");
        // Then the retry: agg-7 goes on from its head.
        wait_for(
            &t,
            "SELECT (count(*) FILTER (WHERE status = 'sent') = 600)::int::int8 \
               FROM {schema}.all_messages",
        )
        .await;
        stop.cancel();
    };
    let (ran, ()) = tokio::join!(relay.run(stop.clone()), check);
    ran.unwrap();

    assert_eq!(row_versions(&t).await, before, "no message row was written");
    assert_eq!(t.count("SELECT count(*) FROM {schema}.retries").await, 0);
    // Each message handed over once, each aggregate's in id order.
    let log = log.lock().unwrap().clone();
    let mut seen = std::collections::HashSet::new();
    for (_, id) in &log {
        assert!(seen.insert(*id), "{id} handed over twice");
    }
    let mut last: std::collections::HashMap<&str, i64> = Default::default();
    for (agg, id) in &log {
        let prev = last.insert(agg, *id).unwrap_or(i64::MIN);
        assert!(prev < *id, "{agg}: {id} after {prev}");
    }
    assert_eq!(log.len(), 600);
    let sink = t
        .count("SELECT count(DISTINCT event_id) FROM {schema}.published_events")
        .await;
    assert_eq!(sink, 600);
}

#[tokio::test]
async fn a_relay_killed_mid_batch_hands_its_lanes_over_and_nothing_is_lost_or_reordered() {
    use crate::support::scripted::{Log, Scripted};
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Arc;
    use std::time::Duration;
    let t = upgraded("io_kill").await;
    let rows: Vec<(String, i64)> = (0..25)
        .flat_map(|n| (0..40).map(move |a| (format!("agg-{a}"), n)))
        .collect();
    crate::support::enqueue_rows(&t, &rows).await;
    let log = Log::default();
    let config = |id: &str| outbox_relay::RelayConfig {
        relay_id: id.into(),
        bucket_lease: Duration::from_secs(2),
        ..lane_config()
    };
    let relay = |id: &str, p: Arc<Scripted>| {
        let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
        Arc::new(outbox_relay::Relay::new(store, p, config(id)).unwrap())
    };
    // Relays a and b share the lanes (two each); a hangs in the middle of
    // a batch and is killed there (its task dropped: no settle, no leave,
    // its connections closed), as by kill -9. Once its lease runs out, b
    // takes its lanes and goes on from a's positions.
    let pa = Arc::new(Scripted::new(&t, &log));
    let pb = Arc::new(Scripted::new(&t, &log));
    // Both hold their first batch until the lanes are shared out.
    pa.hang.store(true, SeqCst);
    pb.hang.store(true, SeqCst);
    let a = relay("a", pa.clone());
    let b = relay("b", pb.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let run_a = tokio::spawn({
        let (a, stop) = (a.clone(), stop.clone());
        async move { a.run(stop).await }
    });
    let check = async {
        wait_for(
            &t,
            "SELECT (count(DISTINCT owner) = 2)::int::int8 FROM {schema}.relay_buckets \
              WHERE bucket < 4",
        )
        .await;
        pa.hang.store(false, SeqCst);
        pb.hang.store(false, SeqCst);
        wait_for(
            &t,
            "SELECT (count(*) >= 200 AND (SELECT count(DISTINCT relay_id) \
                                            FROM {schema}.lane_positions) = 2)::int::int8 \
               FROM {schema}.all_messages WHERE status = 'sent'",
        )
        .await;
        pa.hang.store(true, SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
        run_a.abort();
        let _ = run_a.await;
        wait_for(
            &t,
            "SELECT (count(*) = 1000)::int::int8 FROM {schema}.all_messages WHERE status = 'sent'",
        )
        .await;
        stop.cancel();
    };
    let (ran, ()) = tokio::join!(b.run(stop.clone()), check);
    ran.unwrap();

    let log = log.lock().unwrap().clone();
    let bad = outbox_testkit::ordering::first_deliveries_out_of_order(&log);
    assert!(bad.is_empty(), "aggregates out of order: {bad:?}");
    let distinct: std::collections::HashSet<i64> = log.iter().map(|(_, id)| *id).collect();
    assert_eq!(distinct.len(), 1000, "every message handed over");
    // a was killed with rows of its lanes left (it had sent fewer than
    // half), so b went on from a's position on at least one of them.
    assert!(
        t.count(
            "SELECT count(DISTINCT a.lane) FROM {schema}.lane_positions a \
               JOIN {schema}.lane_positions b ON b.lane = a.lane AND b.seq > a.seq \
              WHERE a.relay_id = 'a' AND b.relay_id = 'b'"
        )
        .await
            >= 1,
        "b took over a lane of a's"
    );
}

/// Statements per second of an idle relay over the draft, on the default
/// settings (polling: no listener), counted by its store.
async fn idle_statements_per_second(t: &TestSchema) -> f64 {
    use std::time::Duration;
    let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
    let publisher = outbox_relay::publishers::postgres::PostgresPublisher::new(
        t.pool.clone(),
        &t.schema,
        "idle",
    );
    let relay = outbox_relay::Relay::new(store, publisher, Default::default()).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let measure = async {
        tokio::time::sleep(Duration::from_secs(2)).await; // past start-up
        let before = relay.store().statements_issued();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = relay.store().statements_issued();
        stop.cancel();
        (after - before) as f64 / 5.0
    };
    let (ran, per_second) = tokio::join!(relay.run(stop.clone()), measure);
    ran.unwrap();
    per_second
}

#[tokio::test]
async fn an_idle_relay_reads_one_window_a_poll() {
    let t = upgraded("io_idle").await;
    let per_second = idle_statements_per_second(&t).await;
    eprintln!("idle relay over the draft: {per_second:.1} statements/s");
    assert!(per_second <= 1.5, "{per_second} statements/s");
}

#[tokio::test]
async fn one_pass_sends_what_every_lane_holds_then_nothing() {
    let t = upgraded("io_once").await;
    let rows: Vec<(String, i64)> = (0..3)
        .flat_map(|n| (0..8).map(move |a| (format!("agg-{a}"), n)))
        .collect();
    crate::support::enqueue_rows(&t, &rows).await;
    let relay = crate::support::sink_relay(&t, "once", lane_config());
    let first = relay.run_once().await.unwrap();
    assert_eq!(
        (
            first.claimed,
            first.published,
            first.marked_sent,
            first.failed
        ),
        (24, 24, 24, 0),
        "{first}"
    );
    let again = relay.run_once().await.unwrap();
    assert_eq!((again.claimed, again.marked_sent), (0, 0), "{again}");
    relay.leave().await;
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await,
        24
    );
    assert_eq!(
        t.count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
            .await,
        24
    );
}

#[tokio::test]
async fn the_backlog_counts_what_the_lanes_have_not_passed() {
    let t = upgraded("io_backlog").await;
    let admin =
        outbox_relay::Admin::new(outbox_relay::Store::new(t.pool.clone(), t.schema.clone()));
    assert_eq!(admin.backlog().await.unwrap().pending, 0);
    assert_eq!(admin.oldest_waiting_age(None).await.unwrap(), None);
    let rows: Vec<(String, i64)> = (0..2)
        .flat_map(|n| (0..5).map(move |a| (format!("agg-{a}"), n)))
        .collect();
    crate::support::enqueue_rows(&t, &rows).await;
    assert_eq!(admin.backlog().await.unwrap().pending, 10);
    assert!(admin.oldest_waiting_age(None).await.unwrap().is_some());
    assert!(admin
        .oldest_waiting_age(Some("no-such-topic"))
        .await
        .unwrap()
        .is_none());
    let relay = crate::support::sink_relay(&t, "backlog", lane_config());
    relay.run_once().await.unwrap();
    relay.leave().await;
    assert_eq!(admin.backlog().await.unwrap().pending, 0);
    assert_eq!(admin.oldest_waiting_age(None).await.unwrap(), None);
}
