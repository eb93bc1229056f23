//! The relay engine on the real PostgreSQL: claims are leases, settlement is
//! guarded, nothing rolled back is published, nothing committed is lost.

use outbox::{sql::Queries, Delivery, Inbox, NewMessage, Outbox};
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::relay::Ordering;
use outbox_relay::{Clock, Relay, RelayConfig, RetryPolicy, Store};
use outbox_testkit::TestSchema;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn relay(t: &TestSchema, relay_id: &str, config: RelayConfig) -> Relay<PostgresPublisher> {
    let config = RelayConfig {
        relay_id: relay_id.to_owned(),
        ..config
    };
    let publisher =
        PostgresPublisher::new(t.pool.clone(), Arc::new(Queries::new(&t.schema)), relay_id);
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
}

/// The reaper counts an expired lease as a failed attempt: with no
/// backoff, a reaped row is claimable again at once.
fn no_backoff() -> RetryPolicy {
    RetryPolicy {
        schedule: vec![Duration::ZERO],
        ..RetryPolicy::default()
    }
}

async fn enqueue(t: &TestSchema, n: usize, topic: &str) -> Vec<i64> {
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = t.pool.get().await.unwrap();
    let msgs: Vec<NewMessage> = (0..n)
        .map(|i| {
            NewMessage::new("thing.happened", "thing", i.to_string(), &json!({"i": i}))
                .unwrap()
                .topic(topic)
        })
        .collect();
    let mut ids = Vec::with_capacity(n);
    for chunk in msgs.chunks(1000) {
        ids.extend(
            outbox
                .enqueue_many(&**client, chunk)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id),
        );
    }
    ids
}

#[tokio::test]
async fn plain_sql_insert_is_relayed_and_rolled_back_insert_never_is() {
    let t = TestSchema::new("relay_plain").await;
    t.exec(
        "BEGIN; INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('x', 'a', '1', 'rolled.back', '{}'); ROLLBACK; \
         INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('x', 'a', '2', 'committed', '{}');",
    )
    .await;
    let r = relay(&t, "r1", RelayConfig::default());
    let stats = r.run_once().await.unwrap();
    assert_eq!(
        stats.to_string(),
        "claimed=1 published=1 marked_sent=1 failed=0"
    );
    assert_eq!(r.run_once().await.unwrap().claimed, 0);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events WHERE topic = 'committed'")
            .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events WHERE topic = 'rolled.back'")
            .await,
        0
    );
    assert_eq!(t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent' AND sent_at IS NOT NULL AND locked_by = 'r1'").await, 1);
}

#[tokio::test]
async fn two_relays_draining_ten_thousand_publish_each_exactly_once() {
    let t = TestSchema::new("relay_two").await;
    enqueue(&t, 10_000, "bulk").await;
    // Row leases alone (`FOR UPDATE SKIP LOCKED`): with order kept, each
    // relay would own its own aggregates (tests/ordering.rs).
    let cfg = RelayConfig {
        batch_size: 250,
        ordering: Ordering::None,
        ..RelayConfig::default()
    };
    let (a, b) = (relay(&t, "relay-a", cfg.clone()), relay(&t, "relay-b", cfg));
    let drain = |r: Relay<PostgresPublisher>| async move {
        let mut sent = 0;
        loop {
            let s = r.run_once().await.unwrap();
            if s.claimed == 0 {
                return sent;
            }
            assert_eq!(s.marked_sent as usize, s.claimed);
            sent += s.claimed;
        }
    };
    let (sa, sb) = tokio::join!(tokio::spawn(drain(a)), tokio::spawn(drain(b)));
    let (sa, sb) = (sa.unwrap(), sb.unwrap());
    assert_eq!(sa + sb, 10_000);
    assert!(
        sa > 0 && sb > 0,
        "both relays should have worked: {sa} / {sb}"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        10_000
    );
    assert_eq!(
        t.count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
            .await,
        10_000
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await,
        10_000
    );
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages").await, 0);
}

#[tokio::test]
async fn reaper_leaves_live_claims_alone_and_recovers_expired_ones() {
    let t = TestSchema::new("relay_reaper").await;
    enqueue(&t, 4, "t").await;
    // Row leases alone: two relays in one schema claim side by side.
    let live = relay(
        &t,
        "live",
        RelayConfig {
            batch_size: 2,
            ordering: Ordering::None,
            ..RelayConfig::default()
        },
    );
    let claimed = live.claim_and_publish().await.unwrap();
    assert_eq!(claimed.claimed(), 2);
    // A claim taken ten minutes ago by a relay that died.
    let dead = relay(
        &t,
        "dead",
        RelayConfig {
            batch_size: 2,
            ordering: Ordering::None,
            ..RelayConfig::default()
        },
    );
    let _crashed = dead.claim_and_publish().await.unwrap();
    t.exec("UPDATE {schema}.messages SET locked_at = now() - interval '10 minutes' WHERE locked_by = 'dead'")
        .await;

    assert_eq!(
        live.reap().await.unwrap(),
        2,
        "only the expired claim is recovered"
    );
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages WHERE status = 'processing' AND locked_by = 'live'").await, 2);
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'failed' AND locked_by IS NULL \
               AND last_error LIKE 'lease expired (relay dead claimed it at %' \
               AND next_run_at > now()"
        )
        .await,
        2
    );
    let settled = live.settle(claimed).await.unwrap();
    assert_eq!(settled.marked_sent, 2);
}

#[tokio::test]
async fn a_relay_whose_lease_was_taken_over_cannot_settle() {
    let t = TestSchema::new("relay_takeover").await;
    enqueue(&t, 1, "t").await;
    // Row leases alone: with order kept, one relay id is one registration.
    let slow = relay(
        &t,
        "slow",
        RelayConfig {
            retry: no_backoff(),
            ordering: Ordering::None,
            ..RelayConfig::default()
        },
    );
    let slow_batch = slow.claim_and_publish().await.unwrap();
    // The lease expires (as if it had been waited out); the row is
    // recovered and claimed again. The same relay id is used on purpose:
    // the lease is (locked_by, locked_at), so even a second pipeline of one
    // relay cannot settle a stale claim.
    assert_eq!(slow.reap_older_than(Duration::ZERO).await.unwrap(), 1);
    let again = relay(
        &t,
        "slow",
        RelayConfig {
            ordering: Ordering::None,
            ..RelayConfig::default()
        },
    );
    let fresh_batch = again.claim_and_publish().await.unwrap();
    assert_eq!(fresh_batch.claimed(), 1);

    let stale = slow.settle(slow_batch).await.unwrap();
    assert_eq!(
        (stale.marked_sent, stale.failed),
        (0, 0),
        "stale lease settled nothing"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages WHERE status = 'processing'")
            .await,
        1
    );

    let fresh = again.settle(fresh_batch).await.unwrap();
    assert_eq!(fresh.marked_sent, 1);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        2
    );
}

#[tokio::test]
async fn crash_window_publishes_twice_and_the_inbox_processes_once() {
    let t = TestSchema::new("relay_crash").await;
    let ids = enqueue(&t, 1, "orders").await;
    let r = relay(
        &t,
        "r",
        RelayConfig {
            retry: no_backoff(),
            ..RelayConfig::default()
        },
    );
    let first = r.claim_and_publish().await.unwrap();
    assert_eq!(first.published(), 1);
    drop(first); // crash between publish and mark
                 // The lease runs out (as if it had been waited out).
    assert_eq!(r.reap_older_than(Duration::ZERO).await.unwrap(), 1);
    let second = r.run_once().await.unwrap();
    assert_eq!((second.claimed, second.marked_sent), (1, 1));
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.published_events WHERE message_id = {}",
            ids[0]
        ))
        .await,
        2
    );

    let inbox = Inbox::with_schema(&t.schema);
    let mut client = t.pool.get().await.unwrap();
    let rows = client
        .query(
            &format!(
                "SELECT event_id::text, topic FROM {}.published_events ORDER BY id",
                t.schema.quoted()
            ),
            &[],
        )
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    for row in rows {
        let tx = client.transaction().await.unwrap();
        let (event_id, topic): (String, String) = (row.get(0), row.get(1));
        outcomes.push(inbox.record(&*tx, &event_id, &topic).await.unwrap());
        tx.commit().await.unwrap();
    }
    assert_eq!(outcomes, [Delivery::First, Delivery::Duplicate]);
}

#[tokio::test]
async fn permanent_sink_errors_go_dead_and_do_not_stop_the_rest() {
    let t = TestSchema::new("relay_poison").await;
    t.sink_rejects("poison", "check_violation", "poison refused")
        .await;
    enqueue(&t, 3, "good").await;
    enqueue(&t, 1, "poison").await;
    enqueue(&t, 3, "good").await;
    let stats = relay(&t, "r", RelayConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!((stats.claimed, stats.marked_sent, stats.dead), (7, 6, 1));
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE topic = 'poison' AND status = 'dead' \
                 AND dead_reason LIKE '%poison refused%' AND dead_at IS NOT NULL").await,
        1
    );
}

#[tokio::test]
async fn an_unreachable_sink_releases_claims_without_spending_attempts() {
    let t = TestSchema::new("relay_unreachable").await;
    enqueue(&t, 2, "t").await;
    let queries = Arc::new(Queries::new(&t.schema));
    let nowhere = outbox_relay::pool("postgres://postgres@127.0.0.1:1/none", 1).unwrap();
    let r = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        PostgresPublisher::new(nowhere, queries, "r"),
        RelayConfig::default(),
    )
    .unwrap();
    let pass = r.run_once().await.unwrap();
    assert_eq!((pass.claimed, pass.released, pass.failed), (2, 2, 0));
    assert!(r.breaker_open());
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'pending' AND attempts = 0 \
                 AND last_error LIKE 'destination unreachable%' AND locked_by IS NULL"
        )
        .await,
        2
    );
}

#[tokio::test]
async fn retryable_rejections_back_off_then_go_dead_after_max_attempts() {
    let t = TestSchema::new("relay_retryable").await;
    // The sink is up but refuses this topic with a retryable SQLSTATE
    // (serialization_failure): the messages, not the destination, fail.
    t.sink_rejects("flaky", "serialization_failure", "try later")
        .await;
    enqueue(&t, 2, "flaky").await;
    let clock = Arc::new(outbox_relay::ManualClock::new(chrono::Utc::now()));
    let config = RelayConfig {
        retry: RetryPolicy {
            schedule: vec![Duration::from_secs(60)],
            jitter: 0.0,
            max_attempts: 2,
        },
        ..RelayConfig::default()
    };
    let r = relay(&t, "r", config).with_clock(clock.clone());
    let first = r.run_once().await.unwrap();
    assert_eq!(
        (first.claimed, first.failed, first.dead, first.released),
        (2, 2, 0, 0)
    );
    assert!(!r.breaker_open());
    // Scheduled from the injected clock: exactly one schedule step later.
    let due = (clock.now() + chrono::Duration::seconds(60)).to_rfc3339();
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.messages WHERE status = 'failed' AND attempts = 1 \
                 AND last_error LIKE '%try later%' \
                 AND abs(extract(epoch FROM next_run_at - '{due}'::timestamptz)) < 0.001"
        ))
        .await,
        2
    );
    assert_eq!(r.run_once().await.unwrap().claimed, 0, "not due yet");
    t.exec("UPDATE {schema}.messages SET next_run_at = now()")
        .await;
    let second = r.run_once().await.unwrap();
    assert_eq!((second.claimed, second.dead), (2, 2));
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'dead' AND attempts = 2 \
                 AND dead_reason LIKE 'max attempts (2)%try later%'"
        )
        .await,
        2
    );
}

/// The trap DESIGN.md measured: a claim ordered by id that walks past every
/// settled row. Settled rows ahead of the pending ones must not change how
/// much the claim reads. Buffers touched is a count, not a time, so the
/// check does not depend on the machine's speed.
#[tokio::test]
async fn claim_cost_does_not_grow_with_settled_rows_ahead() {
    let t = TestSchema::new("relay_claim_cost").await;
    let claim_buffers = |t: &TestSchema| {
        let sql = Queries::new(&t.schema)
            .claim
            .replace("$1", "500")
            .replace("$2", "'probe'")
            .replace("$3", &i64::MIN.to_string())
            .replace("$4", &i64::MAX.to_string())
            .replace("$5", &i64::MAX.to_string());
        let pool = t.pool.clone();
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let plan: serde_json::Value = tx
                .query_one(
                    &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            tx.rollback().await.unwrap();
            let p = &plan[0]["Plan"];
            p["Shared Hit Blocks"].as_i64().unwrap() + p["Shared Read Blocks"].as_i64().unwrap()
        }
    };
    enqueue(&t, 500, "t").await;
    let empty_ahead = claim_buffers(&t).await;

    let t2 = TestSchema::new("relay_claim_cost_full").await;
    // 200,000 settled rows with lower ids than every pending one: sent rows
    // in the sent table and, the worst case for the hot table, dead rows
    // (which stay in it) plus rows marked sent in place by hand.
    t2.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status, dead_at) \
           SELECT 'x', 'a', g::text, 't', '{}', CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'sent' END, now() \
           FROM generate_series(1, 100000) g; \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, aggregate_type, aggregate_id, \
             topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
           SELECT -g, gen_random_uuid(), 'x', 1, 'a', g::text, 't', '{}', '{}', 1, now(), now(), now() \
           FROM generate_series(1, 100000) g; \
         ANALYZE {schema}.messages;",
    )
    .await;
    enqueue(&t2, 500, "t").await;
    let full_ahead = claim_buffers(&t2).await;
    eprintln!("claim of 500: {empty_ahead} buffers with nothing ahead, {full_ahead} with 200,000 settled rows ahead");
    assert!(
        full_ahead < empty_ahead * 3 / 2 + 50,
        "claim read {full_ahead} buffers with settled rows ahead vs {empty_ahead} without"
    );
    let stats = relay(&t2, "r", RelayConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(stats.marked_sent, 500);
}

/// Claims must be HOT updates (the row rewritten on its own page, no new
/// index entries): that halved the claim's cost. Two ways to lose it
/// without any test turning red are an index that mentions a column the
/// claim writes, and pages too full to hold the claimed versions; this
/// counts what PostgreSQL actually did.
#[tokio::test]
async fn claims_are_hot_updates() {
    let t = TestSchema::new("relay_hot_claims").await;
    enqueue(&t, 2000, "t").await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    let mut claimed = 0;
    for _ in 0..4 {
        claimed += store
            .claim_messages(outbox_relay::store::ClaimParams {
                limit: 500,
                relay_id: "hot",
                from_id: i64::MIN,
                max_batch_bytes: i64::MAX,
                max_message_bytes: i64::MAX,
                ordered: None,
            })
            .await
            .unwrap()
            .messages
            .len();
    }
    assert_eq!(claimed, 2000);
    // Statistics reach the shared counters lazily; flush this backend's
    // and read them in a fresh transaction. The claims ran on pooled
    // connections, so flush every one of them by running through the pool.
    let client = t.pool.get().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (updated, hot): (i64, i64) = loop {
        client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .await
            .unwrap();
        let row = client
            .query_one(
                &format!(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
                      WHERE relid = '{}.messages'::regclass",
                    t.schema.quoted()
                ),
                &[],
            )
            .await
            .unwrap();
        let (u, h): (i64, i64) = (row.get(0), row.get(1));
        if u >= 2000 || std::time::Instant::now() > deadline {
            break (u, h);
        }
        client
            .batch_execute("SELECT pg_sleep(0.2), pg_stat_clear_snapshot()")
            .await
            .unwrap();
    };
    eprintln!("claims: {updated} updates, {hot} HOT");
    assert_eq!(updated, 2000, "statistics never showed the claims");
    // Before migration 5 this was 0. Not 100%: a claimed version is a few
    // bytes longer (locked_by, locked_at), so a page filled to exactly half
    // cannot always hold all of them.
    assert!(
        hot * 5 >= updated * 4,
        "only {hot} of {updated} claim updates were HOT"
    );
}

/// A destination that refuses every message with a retryable error, asking
/// message `i` of a batch to wait `waits[i % len]`.
struct AsksToWait {
    waits: Vec<Option<Duration>>,
}

impl outbox_relay::Publisher for AsksToWait {
    fn name(&self) -> &str {
        "asks-to-wait"
    }
    async fn publish(&self, batch: &[outbox_relay::Message]) -> Vec<outbox_relay::Outcome> {
        (0..batch.len())
            .map(|i| {
                Err(outbox_relay::PublishError {
                    retry_after: self.waits[i % self.waits.len()],
                    ..outbox_relay::PublishError::retryable("busy")
                })
            })
            .collect()
    }
    async fn check(&self) -> Result<(), outbox_relay::PublishError> {
        Ok(())
    }
}

#[tokio::test]
async fn any_retry_after_is_capped_at_the_longest_backoff_step_without_panicking() {
    let t = TestSchema::new("relay_retry_after").await;
    // `Retry-After: 9000000000000` made the relay panic adding it to now.
    let waits = vec![
        Some(Duration::MAX),
        Some(Duration::from_secs(9_000_000_000_000)),
        Some(Duration::from_secs(u64::MAX)),
        Some(Duration::new(u64::MAX, 999_999_999)),
        Some(Duration::ZERO),
        None,
    ];
    let ids = enqueue(&t, waits.len(), "t").await;
    let retry = RetryPolicy {
        schedule: vec![Duration::from_secs(1), Duration::from_secs(60)],
        jitter: 0.0,
        max_attempts: 5,
    };
    let first_step = retry.delay(1);
    let longest = retry.longest_delay();
    let r = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        AsksToWait {
            waits: waits.clone(),
        },
        RelayConfig {
            batch_size: waits.len(),
            retry,
            ..RelayConfig::default()
        },
    )
    .unwrap();
    // As stored: PostgreSQL keeps microseconds.
    let before = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6);
    let stats = r.run_once().await.unwrap();
    let after = chrono::Utc::now();
    assert_eq!((stats.claimed, stats.failed, stats.dead), (6, 6, 0));
    let client = t.pool.get().await.unwrap();
    for (id, wait) in ids.iter().zip(&waits) {
        let row = client
            .query_one(
                &format!(
                    "SELECT status, next_run_at FROM {}.messages WHERE id = $1",
                    t.schema.quoted()
                ),
                &[id],
            )
            .await
            .unwrap();
        let (status, at): (String, chrono::DateTime<chrono::Utc>) = (row.get(0), row.get(1));
        assert_eq!(status, "failed");
        // Honoured up to the longest step, never beyond; below the policy's
        // own delay, the policy wins.
        let delay = wait.unwrap_or_default().clamp(first_step, longest);
        let delay = chrono::Duration::from_std(delay).unwrap();
        assert!(
            before + delay <= at && at <= after + delay,
            "{wait:?}: next run {at}, expected {delay} after {before}..{after}"
        );
    }
    // And the relay carries on.
    assert_eq!(r.run_once().await.unwrap().claimed, 0);
}

/// A destination that accepts the connection and never answers.
struct NeverAnswers;

impl outbox_relay::Publisher for NeverAnswers {
    fn name(&self) -> &str {
        "never-answers"
    }
    async fn publish(&self, _: &[outbox_relay::Message]) -> Vec<outbox_relay::Outcome> {
        std::future::pending().await
    }
    async fn check(&self) -> Result<(), outbox_relay::PublishError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_publish_that_never_returns_fails_retryably_at_the_deadline() {
    let t = TestSchema::new("relay_publish_timeout").await;
    enqueue(&t, 3, "t").await;
    let publish_timeout = outbox_relay::relay::MIN_PUBLISH_TIMEOUT;
    let r = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        NeverAnswers,
        RelayConfig {
            publish_timeout,
            ..RelayConfig::default()
        },
    )
    .unwrap();
    let started = std::time::Instant::now();
    // Bounded by the test too, so a regression fails instead of hanging.
    let stats = tokio::time::timeout(publish_timeout * 50, r.run_once())
        .await
        .expect("the publish deadline ended the pass")
        .unwrap();
    assert!(started.elapsed() >= publish_timeout);
    assert_eq!((stats.claimed, stats.failed, stats.dead), (3, 3, 0));
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.messages WHERE status = 'failed' AND attempts = 1 \
               AND locked_by IS NULL AND last_error = 'publish timed out after {publish_timeout:?}'"
        ))
        .await,
        3,
        "every message failed retryably, spending an attempt"
    );
}

#[test]
fn leases_and_deadlines_too_short_to_work_are_refused() {
    use outbox_relay::relay::{MIN_LEASE, MIN_PUBLISH_TIMEOUT};
    let with = |lease, publish_timeout| {
        RelayConfig {
            lease,
            publish_timeout,
            ..RelayConfig::default()
        }
        .validate()
        .map_err(|e| e.to_string())
    };
    let e = with(Duration::from_millis(1), MIN_PUBLISH_TIMEOUT).unwrap_err();
    assert!(e.contains("lease must be at least 1s"), "{e}");
    assert!(with(Duration::ZERO, MIN_PUBLISH_TIMEOUT).is_err());
    assert!(with(MIN_LEASE, MIN_PUBLISH_TIMEOUT).is_ok());
    let e = with(MIN_LEASE, MIN_PUBLISH_TIMEOUT / 2).unwrap_err();
    assert!(e.contains("publish timeout must be at least"), "{e}");
    assert!(with(Duration::MAX, MIN_PUBLISH_TIMEOUT).is_err());
}
