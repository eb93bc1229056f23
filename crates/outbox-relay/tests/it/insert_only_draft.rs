//! The insert-only engine's schema and statements (docs/design/insert-only.md,
//! phase 2), on the real PostgreSQL, before the relay reads lanes: the
//! draft migration 12 applied after migrations 1 to 11 to a schema of its
//! own, then the lane statements run by hand as the relay runs them. The
//! relay itself over the draft: `insert_only_relay.rs`.

use outbox_testkit::TestSchema;
use tokio_postgres::Client;

const DRAFT: &str = outbox::sql::INSERT_ONLY_DRAFT;
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

/// A schema at migration 11 with the draft migration 12 applied.
pub(crate) async fn upgraded(label: &str) -> TestSchema {
    let t = TestSchema::new(label).await;
    t.exec(DRAFT).await;
    t
}

/// `text` rendered for `t`'s schema.
pub(crate) fn sql(t: &TestSchema, text: &str) -> String {
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
