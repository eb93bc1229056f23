//! The relay engine against a destination that fails: a permanent refusal
//! goes dead alone, an unreachable one hands claims back, retryable
//! refusals back off to dead, a publish that never returns times out, and
//! a slow part of a batch holds only itself. Leases and crashes: `relay.rs`.

use crate::support;

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Clock, Relay, RelayConfig, RetryPolicy, Store};
use outbox_testkit::TestSchema;
use std::sync::Arc;
use std::time::Duration;
use support::{enqueue_n as enqueue, sink_relay as relay};

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
    let nowhere = outbox_relay::pool("postgres://postgres@127.0.0.1:1/none", 1).unwrap();
    let r = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        PostgresPublisher::new(nowhere, &t.schema, "r"),
        RelayConfig::default(),
    )
    .unwrap();
    let pass = r.run_once().await.unwrap();
    assert_eq!((pass.claimed, pass.released, pass.failed), (2, 2, 0));
    assert!(r.breaker_open());
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND attempts = 0 \
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
    // The minute passes, for the database and for the relay's clock: its
    // own due time for the rows comes, and claims go back to them. (A row
    // made due behind its back is found by the next sweep, which this
    // frozen clock never brings.)
    t.exec("UPDATE {schema}.messages SET next_run_at = now()")
        .await;
    clock.advance(Duration::from_secs(60));
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
                    "SELECT status, next_run_at FROM {}.all_messages WHERE id = $1",
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
            "SELECT count(*) FROM {{schema}}.all_messages WHERE status = 'failed' AND attempts = 1 \
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

/// A destination that acknowledges the messages of topic `fast` at once
/// and those of `slow` only after `hold`: Kafka's delivery reports when
/// one topic's partition leader is slow.
struct SlowTopic {
    hold: Duration,
}

impl outbox_relay::Publisher for SlowTopic {
    fn name(&self) -> &str {
        "slow-topic"
    }
    async fn publish(&self, batch: &[outbox_relay::Message]) -> Vec<outbox_relay::Outcome> {
        self.publish_reporting(batch, &outbox_relay::Accepted::ignored())
            .await
    }
    async fn publish_reporting(
        &self,
        batch: &[outbox_relay::Message],
        accepted: &outbox_relay::Accepted,
    ) -> Vec<outbox_relay::Outcome> {
        for (i, m) in batch.iter().enumerate() {
            if m.topic == "fast" {
                accepted.accepted(i);
            }
        }
        tokio::time::sleep(self.hold).await;
        vec![Ok(()); batch.len()]
    }
    async fn check(&self) -> Result<(), outbox_relay::PublishError> {
        Ok(())
    }
}

/// Messages the destination acknowledges early are marked sent while the
/// rest of their batch is still in flight: one slow topic does not hold
/// the others for as long as it takes (issue 16). The pass then settles
/// the rest, and counts every row once.
#[tokio::test]
async fn messages_acknowledged_early_are_sent_while_their_batch_is_in_flight() {
    let t = TestSchema::new("relay_early_settle").await;
    let fast = enqueue(&t, 30, "fast").await;
    enqueue(&t, 10, "slow").await;
    let hold = Duration::from_secs(3);
    let r = Arc::new(
        Relay::new(
            Store::new(t.pool.clone(), t.schema.clone()),
            SlowTopic { hold },
            RelayConfig::default(),
        )
        .unwrap(),
    );
    let started = std::time::Instant::now();
    let pass = tokio::spawn({
        let r = r.clone();
        async move { r.run_once().await }
    });
    let sent = |topic: &'static str| {
        let t = &t;
        async move {
            t.count(&format!(
                "SELECT count(*) FROM {{schema}}.all_messages WHERE status = 'sent' AND topic = '{topic}'"
            ))
            .await
        }
    };
    while sent("fast").await < fast.len() as i64 {
        assert!(
            started.elapsed() < hold - Duration::from_millis(500),
            "the acknowledged messages waited for the slow ones"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sent("slow").await, 0, "the slow ones are still in flight");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'processing'")
            .await,
        10
    );
    let stats = pass.await.unwrap().unwrap();
    assert!(started.elapsed() >= hold);
    assert_eq!(
        (
            stats.claimed,
            stats.published,
            stats.marked_sent,
            stats.failed
        ),
        (40, 40, 40, 0),
        "{stats:?}"
    );
    assert_eq!(sent("slow").await, 10);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status <> 'sent'")
            .await,
        0
    );
}
