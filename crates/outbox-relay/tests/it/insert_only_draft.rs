//! The insert-only engine's schema and statements (docs/design/insert-only.md,
//! phase 2), on the real PostgreSQL, before the relay reads lanes: the
//! draft migration 12 applied after migrations 1 to 11 to a schema of its
//! own, then the lane statements run by hand as the relay will run them.

use outbox_testkit::TestSchema;
use tokio_postgres::Client;

const DRAFT: &str = include_str!("../../../outbox/src/sql/next/0012_insert_only.sql");
const WINDOW: &str = include_str!("../../src/store/sql/lane/window.sql");
const BATCH: &str = include_str!("../../src/store/sql/lane/batch.sql");
const SETTLE: &str = include_str!("../../src/store/sql/lane/settle.sql");

/// A connection whose driver runs on a thread of its own: if the test
/// fails while it holds a transaction open, dropping it closes the socket
/// (the server rolls back) even while the test's runtime is blocked in the
/// schema's synchronous drop, which would otherwise wait for its locks.
async fn own_thread_client() -> Client {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (client, conn) =
                tokio_postgres::connect(&outbox_testkit::database_url(), tokio_postgres::NoTls)
                    .await
                    .unwrap();
            let _ = tx.send(client);
            let _ = conn.await;
        });
    });
    rx.await.unwrap()
}

async fn upgraded(label: &str) -> TestSchema {
    let t = TestSchema::new(label).await;
    t.exec(DRAFT).await;
    t
}

fn sql(t: &TestSchema, text: &str) -> String {
    outbox::sql::render(text, &t.schema)
}

/// A lane's window: (seq, lo, hi, after_id).
async fn window(t: &TestSchema, c: &Client, lane: i32, tick: bool) -> (i64, String, String, i64) {
    let r = c.query_one(&sql(t, WINDOW), &[&lane, &tick]).await.unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// The ids of a lane's next batch and whether each is held.
async fn batch(
    t: &TestSchema,
    c: &Client,
    lane: i32,
    w: &(i64, String, String, i64),
) -> Vec<(i64, bool)> {
    let rows = c
        .query(
            &sql(t, BATCH),
            &[
                &lane,
                &w.1,
                &w.2,
                &w.3,
                &500_i64,
                &(64_i64 << 20),
                &(1_i64 << 20),
            ],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get("id"), r.get("held"))).collect()
}

/// The lane every message of aggregate `a` (type `t`) is in.
async fn lane_of(t: &TestSchema, c: &Client, agg: &str) -> i32 {
    c.query_one(&sql(t, "SELECT {schema}.message_lane('t', $1)"), &[&agg])
        .await
        .unwrap()
        .get(0)
}

/// Aggregates `a0`, `a1`, ... of `lane`, `n` of them.
async fn aggregates_in(t: &TestSchema, c: &Client, lane: i32, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0.. {
        let a = format!("a{i}");
        if lane_of(t, c, &a).await == lane {
            out.push(a);
            if out.len() == n {
                return out;
            }
        }
    }
    unreachable!()
}

async fn enqueue(c: &Client, t: &TestSchema, agg: &str) -> i64 {
    c.query_one(
        &sql(
            t,
            "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
             VALUES ('e', 't', $1, 'topic', '{}') RETURNING id",
        ),
        &[&agg],
    )
    .await
    .unwrap()
    .get(0)
}

async fn status(t: &TestSchema, c: &Client, id: i64) -> String {
    c.query_one(
        &sql(t, "SELECT status FROM {schema}.all_messages WHERE id = $1"),
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}

async fn register(t: &TestSchema, relay: &str, token: i64) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.relays (relay_id, token, ordering, lease_until) \
         VALUES ('{relay}', {token}, 'aggregate', now() + interval '1 minute'); \
         UPDATE {{schema}}.relay_buckets SET owner = '{relay}';"
    ))
    .await;
}

type Settled = (i64, i64, i64, i64);

#[allow(clippy::too_many_arguments)]
async fn settle(
    t: &TestSchema,
    c: &Client,
    lane: i32,
    w: &(i64, String, String, i64),
    last_id: i64,
    relay: (&str, i64),
    failed: &[i64],
    held: &[i64],
) -> Result<Settled, tokio_postgres::Error> {
    let errors: Vec<String> = failed.iter().map(|_| "refused".to_string()).collect();
    let next: Vec<std::time::SystemTime> = failed
        .iter()
        .map(|_| std::time::SystemTime::now() + std::time::Duration::from_secs(60))
        .collect();
    let none: Vec<i64> = Vec::new();
    let no_reasons: Vec<String> = Vec::new();
    let r = c
        .query_one(
            &sql(t, SETTLE),
            &[
                &lane,
                &w.0,
                &w.1,
                &w.2,
                &last_id,
                &relay.0,
                &relay.1,
                &failed,
                &errors,
                &next,
                &none,
                &no_reasons,
                &held,
            ],
        )
        .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
}

#[tokio::test]
async fn the_upgrade_keeps_every_state_and_the_producer_contract() {
    let t = TestSchema::new("io_upgrade").await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, next_run_at, last_error, dead_at, dead_reason, locked_by, locked_at) \
         VALUES ('e', 't', '1', 'x', '{}', 'pending', 0, now(), NULL, NULL, NULL, NULL, NULL), \
                ('e', 't', '2', 'x', '{}', 'failed', 2, now() + interval '1 hour', 'boom', NULL, NULL, NULL, NULL), \
                ('e', 't', '3', 'x', '{}', 'dead', 9, now(), 'gone', now(), 'gone', NULL, NULL), \
                ('e', 't', '4', 'x', '{}', 'processing', 1, now(), NULL, NULL, NULL, 'r1', now()); \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
         VALUES (100, gen_random_uuid(), 'e', 1, 't', '5', 'x', '{}', '{}', 1, now(), now(), now());",
    )
    .await;
    let states = "SELECT string_agg(aggregate_id || '=' || status || '/' || attempts, ',' ORDER BY aggregate_id) \
                  FROM {schema}.all_messages";
    let c = t.pool.get().await.unwrap();
    let before: String = c.query_one(&sql(&t, states), &[]).await.unwrap().get(0);
    assert_eq!(
        before,
        "1=pending/0,2=failed/2,3=dead/9,4=processing/1,5=sent/1"
    );

    t.exec(DRAFT).await;
    let after: String = c.query_one(&sql(&t, states), &[]).await.unwrap().get(0);
    assert_eq!(
        after, before,
        "every row keeps its state through the upgrade"
    );
    assert_eq!(t.count("SELECT count(*) FROM {schema}.retries").await, 4);
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages").await, 0);

    // Re-runnable: a second application finds nothing to do.
    t.exec(DRAFT).await;
    let again: String = c.query_one(&sql(&t, states), &[]).await.unwrap().get(0);
    assert_eq!(again, before);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.lane_positions")
            .await,
        4
    );

    // The producer's INSERT, unchanged; the id goes on from the old table's.
    let id = enqueue(&c, &t, "6").await;
    let old_max = t.count("SELECT max(id) FROM {schema}.retries").await;
    assert!(id > old_max, "{id} after {old_max}");
    assert_eq!(status(&t, &c, id).await, "pending");
    // A duplicate event_id within a partition is refused, as before.
    let dup = c
        .batch_execute(&sql(
            &t,
            "INSERT INTO {schema}.messages (event_id, event_type, aggregate_type, aggregate_id, topic, payload) \
             SELECT event_id, 'e', 't', '7', 'x', '{}' FROM {schema}.messages LIMIT 1",
        ))
        .await
        .unwrap_err();
    let db = dup.as_db_error().expect("a server error");
    assert_eq!(
        db.code(),
        &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
    );
    assert!(
        db.constraint()
            .unwrap_or("")
            .starts_with("messages_event_id_key"),
        "{db:?}"
    );
    // An id below the new table's (one the kept rows may hold) is refused.
    let kept = c
        .batch_execute(&sql(
            &t,
            "INSERT INTO {schema}.messages (id, event_type, aggregate_type, aggregate_id, topic, payload) \
             VALUES (1, 'e', 't', '9', 'x', '{}')",
        ))
        .await
        .unwrap_err();
    assert_eq!(
        kept.as_db_error().and_then(|d| d.constraint()),
        Some("messages_id_not_kept"),
        "{kept}"
    );
    // The checks of migrations 6 and 10 hold at the door.
    for bad in [
        "headers) VALUES ('e', 't', '8', 'x', '{}', '[1]')",
        "created_at) VALUES ('e', 't', '8', 'x', '{}', 'infinity')",
    ] {
        let e = c
            .batch_execute(&sql(
                &t,
                &format!("INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, {bad}"),
            ))
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{e}"
        );
    }
}

/// A row whose transaction is still running when a window is taken is in a
/// later window, whatever its id: no batch passes a row that may still
/// commit, and the row is read once it has.
#[tokio::test]
async fn a_window_never_passes_a_row_that_may_still_commit() {
    let t = upgraded("io_window").await;
    let c = t.pool.get().await.unwrap();
    let mut late = own_thread_client().await;
    let lane = 0;
    let aggs = aggregates_in(&t, &c, lane, 2).await;

    let tx = late.transaction().await.unwrap();
    let low: i64 = tx
        .query_one(
            &sql(
                &t,
                "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                 VALUES ('e', 't', $1, 'topic', '{}') RETURNING id",
            ),
            &[&aggs[0]],
        )
        .await
        .unwrap()
        .get(0);
    let high = enqueue(&c, &t, &aggs[1]).await;
    assert!(low < high);

    let w = window(&t, &c, lane, true).await;
    assert_eq!(
        batch(&t, &c, lane, &w).await,
        vec![(high, false)],
        "the running row waits"
    );
    register(&t, "r1", 7).await;
    assert_eq!(
        settle(&t, &c, lane, &w, high, ("r1", 7), &[], &[])
            .await
            .unwrap(),
        (1, 0, 0, 0)
    );
    assert_eq!(status(&t, &c, high).await, "sent");

    tx.commit().await.unwrap();
    assert_eq!(status(&t, &c, low).await, "pending");
    let w2 = window(&t, &c, lane, true).await;
    assert_eq!(w2.0, w.0 + 1);
    assert_eq!(
        batch(&t, &c, lane, &w2).await,
        vec![(low, false)],
        "read once committed"
    );
    settle(&t, &c, lane, &w2, low, ("r1", 7), &[], &[])
        .await
        .unwrap();
    assert_eq!(status(&t, &c, low).await, "sent");
    let w3 = window(&t, &c, lane, true).await;
    assert!(batch(&t, &c, lane, &w3).await.is_empty(), "each row once");
}

/// Refused rows and the rows of held aggregates go to `retries` in the
/// batch's settle, with their states; a second settle from one position,
/// or one without the lease, writes nothing.
#[tokio::test]
async fn a_settle_moves_the_rare_path_to_retries_and_is_fenced() {
    let t = upgraded("io_settle").await;
    let c = t.pool.get().await.unwrap();
    let lane = 1;
    let aggs = aggregates_in(&t, &c, lane, 2).await;
    let a1 = enqueue(&c, &t, &aggs[0]).await;
    let b1 = enqueue(&c, &t, &aggs[1]).await;
    let a2 = enqueue(&c, &t, &aggs[0]).await;
    register(&t, "r1", 7).await;

    let w = window(&t, &c, lane, true).await;
    assert_eq!(
        batch(&t, &c, lane, &w).await,
        vec![(a1, false), (b1, false), (a2, false)]
    );
    // Without the lease (wrong token) nothing is written.
    assert_eq!(
        settle(&t, &c, lane, &w, a2, ("r1", 8), &[a1], &[a2])
            .await
            .unwrap(),
        (0, 0, 0, 0)
    );
    assert_eq!(t.count("SELECT count(*) FROM {schema}.retries").await, 0);
    // a1 refused, a2 behind it held; b1 sent.
    assert_eq!(
        settle(&t, &c, lane, &w, a2, ("r1", 7), &[a1], &[a2])
            .await
            .unwrap(),
        (1, 1, 0, 1)
    );
    let got: Vec<String> = {
        let mut v = Vec::new();
        for id in [a1, b1, a2] {
            v.push(status(&t, &c, id).await);
        }
        v
    };
    assert_eq!(got, ["failed", "sent", "pending"]);
    // Settling again from the same position: the other's settle won.
    let again = settle(&t, &c, lane, &w, a2, ("r1", 7), &[], &[])
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
    );

    // The aggregate is held while its head is in retries: a later message
    // of it comes back held, the other aggregate's not.
    let a3 = enqueue(&c, &t, &aggs[0]).await;
    let b2 = enqueue(&c, &t, &aggs[1]).await;
    let w2 = window(&t, &c, lane, true).await;
    assert_eq!(
        batch(&t, &c, lane, &w2).await,
        vec![(a3, true), (b2, false)]
    );
    // Another lane's reader does not see them.
    let other = window(&t, &c, (lane + 1) % 4, true).await;
    assert!(batch(&t, &c, (lane + 1) % 4, &other).await.is_empty());
}

/// The lanes a relay owns after one heartbeat: every bucket it holds is in
/// one of them, and it holds all of each lane's buckets.
async fn beat(t: &TestSchema, c: &Client, relay: &str, token: i64) -> Vec<i32> {
    let rows = c
        .query(
            &sql(t, "SELECT bucket FROM {schema}.relay_heartbeat($1, $2, 'aggregate', 30) WHERE bucket IS NOT NULL"),
            &[&relay, &token],
        )
        .await
        .unwrap();
    let buckets: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    let mut lanes: Vec<i32> = buckets.iter().map(|b| b % 4).collect();
    lanes.sort();
    lanes.dedup();
    assert_eq!(
        buckets.len(),
        lanes.len() * 256,
        "{relay} holds whole lanes: {lanes:?}"
    );
    lanes
}

/// Buckets go a lane at a time: two relays own two lanes each, a third
/// waits as a standby and takes the lanes of one whose lease ran out.
#[tokio::test]
async fn buckets_are_leased_a_lane_at_a_time() {
    let t = upgraded("io_lanes").await;
    let c = t.pool.get().await.unwrap();
    assert_eq!(beat(&t, &c, "r1", 1).await, [0, 1, 2, 3]);
    assert_eq!(
        beat(&t, &c, "r2", 2).await,
        Vec::<i32>::new(),
        "none free yet"
    );
    assert_eq!(
        beat(&t, &c, "r1", 1).await,
        [0, 1],
        "r1 gives back its share's surplus"
    );
    assert_eq!(beat(&t, &c, "r2", 2).await, [2, 3]);
    assert_eq!(beat(&t, &c, "r3", 3).await, Vec::<i32>::new(), "a standby");
    assert_eq!(beat(&t, &c, "r1", 1).await, [0, 1]);
    t.exec("UPDATE {schema}.relays SET lease_until = now() - interval '1 s' WHERE relay_id = 'r1'")
        .await;
    assert_eq!(
        beat(&t, &c, "r3", 3).await,
        [0, 1],
        "r1's lanes, once its lease ran out"
    );
    assert_eq!(beat(&t, &c, "r2", 2).await, [2, 3]);
}

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
