//! The long-running relay: NOTIFY wake-up and its poll fallback, the
//! breaker through a destination outage, lease extension for a slow
//! destination, shutdown, concurrency and the rate limit's claim cap.

use outbox::{NewMessage, Outbox};
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{
    Message, Outcome, PublishError, Publisher, Relay, RelayConfig, RetryPolicy, Store,
};
use outbox_testkit::{database_url, TestDatabase, TestSchema};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn enqueue(t: &TestSchema, n: usize) {
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = t.pool.get().await.unwrap();
    let msgs: Vec<NewMessage> = (0..n)
        .map(|i| NewMessage::new("e", "a", i.to_string(), &json!({"i": i})).unwrap())
        .collect();
    outbox.enqueue_many(&**client, &msgs).await.unwrap();
}

fn sink(t: &TestSchema) -> PostgresPublisher {
    PostgresPublisher::new(t.pool.clone(), &t.schema, "test")
}

fn relay<P: Publisher>(t: &TestSchema, publisher: P, config: RelayConfig) -> Relay<P> {
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
    .with_listener(database_url().parse().unwrap())
}

/// Runs `r` until `check` is done, then shuts it down; returns what
/// `check` returned once `run` has returned.
async fn while_running<P: Publisher, T>(
    r: &Relay<P>,
    check: impl std::future::Future<Output = T>,
) -> T {
    let stop = CancellationToken::new();
    let (ran, out) = tokio::join!(r.run(stop.clone()), async {
        let out = check.await;
        stop.cancel();
        out
    });
    ran.unwrap();
    out
}

/// Polls `sql` (a count) until it equals `want`, for at most `within`.
async fn eventually(t: &TestSchema, sql: &str, want: i64, within: Duration) -> i64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let got = t.count(sql).await;
        if got == want || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The real sink, slowed down: a destination that takes its time to ack.
struct Slow {
    inner: PostgresPublisher,
    delay: Duration,
}

impl Publisher for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        tokio::time::sleep(self.delay).await;
        self.inner.publish(batch).await
    }
    async fn check(&self) -> Result<(), PublishError> {
        self.inner.check().await
    }
}

#[tokio::test]
async fn notify_wakes_the_relay_long_before_the_poll_interval() {
    let t = TestSchema::new("run_notify").await;
    let r = relay(
        &t,
        sink(&t),
        RelayConfig {
            idle_sleep: Duration::from_secs(3600),
            ..RelayConfig::default()
        },
    );
    let sent = while_running(&r, async {
        // Let the relay make its first (empty) pass and start listening.
        tokio::time::sleep(Duration::from_millis(300)).await;
        enqueue(&t, 5).await;
        let sent = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            5,
            Duration::from_secs(20),
        )
        .await;
        sent
    })
    .await;
    assert_eq!(
        sent, 5,
        "an hour-long poll interval: only NOTIFY can have woken the relay"
    );
}

#[tokio::test]
async fn with_notify_off_the_poll_interval_still_finds_messages() {
    let t = TestSchema::new("run_poll").await;
    let r = relay(
        &t,
        sink(&t),
        RelayConfig {
            notify: false,
            idle_sleep: Duration::from_millis(100),
            ..RelayConfig::default()
        },
    );
    let sent = while_running(&r, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        enqueue(&t, 3).await;
        let sent = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            3,
            Duration::from_secs(20),
        )
        .await;
        sent
    })
    .await;
    assert_eq!(sent, 3);
}

#[tokio::test]
async fn a_destination_down_longer_than_the_retry_schedule_sends_nothing_to_dead() {
    let t = TestSchema::new("run_breaker").await;
    let sink_db = TestDatabase::new("run_breaker_sink").await;
    let sink_pool = outbox_relay::pool(&sink_db.url(), 2).unwrap();
    let publisher = PostgresPublisher::new(sink_pool, &t.schema, "test");
    publisher.ensure_sink().await.unwrap();

    sink_db.refuse_connections().await;
    enqueue(&t, 50).await;
    let r = relay(
        &t,
        publisher,
        RelayConfig {
            batch_size: 20,
            retry: RetryPolicy {
                schedule: vec![Duration::from_millis(100)],
                jitter: 0.0,
                max_attempts: 3,
            },
            idle_sleep: Duration::from_millis(100),
            breaker_max_backoff: Duration::from_millis(400),
            ..RelayConfig::default()
        },
    );
    let (dead_during, open_during, max_attempts, sent) = while_running(&r, async {
        // Many times the whole retry schedule (3 attempts, 100 ms apart).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let dead_during = t
            .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await;
        let open_during = r.breaker_open();
        let max_attempts = t.count("SELECT coalesce(max(attempts), 0)::int8 FROM {schema}.all_messages WHERE status NOT IN ('processing', 'sent')").await;
        sink_db.accept_connections().await;
        let sent = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            50,
            Duration::from_secs(30),
        )
        .await;
        (dead_during, open_during, max_attempts, sent)
    })
    .await;
    assert_eq!(dead_during, 0, "an outage must not dead-letter messages");
    assert!(
        open_during,
        "the breaker should be open while the sink is down"
    );
    assert_eq!(max_attempts, 0, "released rows get their attempt back");
    assert_eq!(sent, 50);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        0
    );
    assert!(!r.breaker_open());
}

#[tokio::test]
async fn a_slow_destination_keeps_its_lease_and_no_second_relay_republishes() {
    let t = TestSchema::new("run_lease_extend").await;
    enqueue(&t, 3).await;
    // The shortest lease allowed, so the publish outlasts several of them.
    let lease = outbox_relay::relay::MIN_LEASE;
    let slow = relay(
        &t,
        Slow {
            inner: sink(&t),
            delay: lease * 3,
        },
        RelayConfig {
            relay_id: "slow".into(),
            lease,
            ..RelayConfig::default()
        },
    );
    let other = relay(
        &t,
        sink(&t),
        RelayConfig {
            relay_id: "other".into(),
            lease,
            ..RelayConfig::default()
        },
    );
    let publishing = slow.run_once();
    let competing = async {
        let mut taken = 0;
        // Reap and claim repeatedly while the slow batch is in flight.
        for _ in 0..15 {
            tokio::time::sleep(lease / 4).await;
            other.reap().await.unwrap();
            taken += other.run_once().await.unwrap().claimed;
        }
        taken
    };
    let (stats, taken) = tokio::join!(publishing, competing);
    let stats = stats.unwrap();
    assert_eq!(
        taken, 0,
        "the extended lease kept the rows from being taken over"
    );
    assert_eq!(stats.marked_sent, 3);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        3
    );
}

#[tokio::test]
async fn shutdown_releases_claims_it_cannot_finish() {
    let t = TestSchema::new("run_shutdown").await;
    enqueue(&t, 4).await;
    let r = relay(
        &t,
        Slow {
            inner: sink(&t),
            delay: Duration::from_secs(3600),
        },
        RelayConfig {
            shutdown_grace: Duration::from_millis(200),
            ..RelayConfig::default()
        },
    );
    let claimed = while_running(&r, async {
        let claimed = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'processing'",
            4,
            Duration::from_secs(10),
        )
        .await;
        claimed
    })
    .await;
    assert_eq!(claimed, 4);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND attempts = 0 AND locked_by IS NULL").await,
        4,
        "released without spending an attempt"
    );
}

#[tokio::test]
async fn shutdown_lets_a_quick_batch_finish() {
    let t = TestSchema::new("run_shutdown_finish").await;
    enqueue(&t, 4).await;
    let r = relay(
        &t,
        Slow {
            inner: sink(&t),
            delay: Duration::from_millis(500),
        },
        RelayConfig::default(),
    );
    while_running(&r, async {
        eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'processing'",
            4,
            Duration::from_secs(10),
        )
        .await;
    })
    .await;
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await,
        4
    );
}

#[tokio::test]
async fn concurrent_pipelines_publish_each_message_once() {
    let t = TestSchema::new("run_concurrency").await;
    enqueue(&t, 3000).await;
    let r = relay(
        &t,
        sink(&t),
        RelayConfig {
            concurrency: 4,
            batch_size: 100,
            ..RelayConfig::default()
        },
    );
    let sent = while_running(&r, async {
        let sent = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            3000,
            Duration::from_secs(60),
        )
        .await;
        sent
    })
    .await;
    assert_eq!(sent, 3000);
    assert_eq!(
        t.count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
            .await,
        3000
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        3000
    );
}

#[tokio::test]
async fn the_rate_limit_caps_each_claim() {
    let t = TestSchema::new("run_rate").await;
    enqueue(&t, 100).await;
    let r = relay(
        &t,
        sink(&t),
        RelayConfig {
            rate_limit: Some(30),
            batch_size: 500,
            ..RelayConfig::default()
        },
    );
    let first = r.run_once().await.unwrap();
    assert_eq!(first.claimed, 30);
    assert_eq!(first.marked_sent, 30);
}

/// The real sink, after its first call panics.
struct PanicsOnce {
    inner: PostgresPublisher,
    panicked: std::sync::atomic::AtomicBool,
}

impl Publisher for PanicsOnce {
    fn name(&self) -> &str {
        "panics-once"
    }
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("publisher bug");
        }
        self.inner.publish(batch).await
    }
    async fn check(&self) -> Result<(), PublishError> {
        self.inner.check().await
    }
}

#[tokio::test]
async fn a_publisher_panic_fails_its_batch_and_the_relay_keeps_running() {
    let t = TestSchema::new("run_publisher_panic").await;
    let n = 10;
    enqueue(&t, n).await;
    let r = relay(
        &t,
        PanicsOnce {
            inner: sink(&t),
            panicked: false.into(),
        },
        RelayConfig {
            retry: RetryPolicy {
                schedule: vec![Duration::from_millis(10)],
                ..RetryPolicy::default()
            },
            ..RelayConfig::default()
        },
    );
    let sent = while_running(&r, async {
        eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            n as i64,
            Duration::from_secs(30),
        )
        .await
    })
    .await;
    assert_eq!(sent, n as i64, "the relay carried on after the panic");
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages \
              WHERE status = 'sent' AND attempts = 2 AND last_error = 'publisher panics-once panicked: publisher bug'"
        )
        .await,
        n as i64,
        "the panicking batch failed retryably, then went out"
    );
}

/// A destination that is down until told otherwise, whose health check
/// takes a while and records how many run at once.
struct Outage {
    inner: PostgresPublisher,
    down: std::sync::atomic::AtomicBool,
    checks: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl Publisher for Outage {
    fn name(&self) -> &str {
        "outage"
    }
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if self.down.load(Ordering::SeqCst) {
            return vec![Err(PublishError::retryable("connection refused")); batch.len()];
        }
        self.inner.publish(batch).await
    }
    async fn check(&self) -> Result<(), PublishError> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        // Long enough for checks started together to overlap.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(PublishError::retryable("connection refused"));
        }
        self.inner.check().await
    }
}

#[tokio::test]
async fn during_an_outage_one_pipeline_probes_at_a_time_then_all_resume() {
    let t = TestSchema::new("run_half_open").await;
    let concurrency = 4;
    let batch_size = 5;
    let n = concurrency * batch_size * 4;
    enqueue(&t, n).await;
    let outage = Arc::new(Outage {
        inner: sink(&t),
        down: true.into(),
        checks: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        most_in_flight: AtomicUsize::new(0),
    });
    let r = relay(
        &t,
        outage.clone(),
        RelayConfig {
            concurrency,
            batch_size,
            breaker_max_backoff: Duration::from_millis(200),
            ..RelayConfig::default()
        },
    );
    let (sent, checks_in_outage) = while_running(&r, async {
        // Several probe rounds, each with every pipeline waiting on it.
        while outage.checks.load(Ordering::SeqCst) < concurrency * 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let checks = outage.checks.load(Ordering::SeqCst);
        outage.down.store(false, Ordering::SeqCst);
        let sent = eventually(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'",
            n as i64,
            Duration::from_secs(30),
        )
        .await;
        (sent, checks)
    })
    .await;
    assert!(checks_in_outage >= concurrency * 2);
    assert_eq!(
        outage.most_in_flight.load(Ordering::SeqCst),
        1,
        "{checks_in_outage} checks during the outage, never two at once"
    );
    assert_eq!(sent, n as i64, "all pipelines resumed");
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent' AND attempts > 1"
        )
        .await,
        0,
        "the outage spent no attempt"
    );
}

/// `Relay::run` is the whole engine: with `archive_after` set, an embedded
/// relay archives old sent rows itself, with no task started beside it.
#[tokio::test]
async fn run_archives_old_sent_rows_itself_when_asked() {
    let t = TestSchema::new("relay_run_archives").await;
    t.exec(
        "INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, aggregate_type, \
             aggregate_id, topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
           SELECT g, gen_random_uuid(), 'x', 1, 'a', g::text, 't', '{}', '{}', 1, now(), \
                  now() - interval '2 days', now() - interval '2 days' \
           FROM generate_series(1, 20) g",
    )
    .await;
    let r = relay(
        &t,
        sink(&t),
        RelayConfig {
            archive_after: Some(Duration::from_secs(86_400)),
            ..RelayConfig::default()
        },
    );
    let archived = while_running(
        &r,
        eventually(
            &t,
            "SELECT count(*) FROM {schema}.archived_messages",
            20,
            Duration::from_secs(10),
        ),
    )
    .await;
    assert_eq!(archived, 20);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages_sent").await,
        0
    );
}
