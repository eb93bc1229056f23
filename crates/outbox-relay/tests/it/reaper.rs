//! The lease reaper on the real PostgreSQL: an expired lease counts as a
//! failed attempt, so a message that kills every relay claiming it backs
//! off and then goes dead instead of coming back at once, forever.

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Relay, RelayConfig, RetryPolicy, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;

fn relay(t: &TestSchema, relay_id: &str, max_attempts: i32) -> Relay<PostgresPublisher> {
    let config = RelayConfig {
        relay_id: relay_id.to_owned(),
        retry: RetryPolicy {
            schedule: vec![Duration::from_secs(60), Duration::from_secs(600)],
            jitter: 0.0,
            max_attempts,
        },
        // A row made due behind the relay's back (next_run_at set by hand
        // below) is found by the next sweep, as a row another relay failed
        // would be; the relay's own due time for it is still 600 s away.
        sweep_interval: Duration::from_millis(100),
        ..RelayConfig::default()
    };
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, relay_id);
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
}

/// One row as a relay that died left it: `processing`, claimed an hour ago
/// by `crashed`, on its `attempts`-th attempt.
async fn crashed_claim(t: &TestSchema, attempts: i32) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, locked_by, locked_at) \
         VALUES ('e', 'a', '1', 't', '{{}}', 'processing', {attempts}, 'crashed', \
           '2026-01-02 03:04:05.678901+00')"
    ))
    .await;
}

#[tokio::test]
async fn an_expired_lease_at_max_attempts_goes_dead_naming_the_lease() {
    let t = TestSchema::new("reap_dead").await;
    crashed_claim(&t, 3).await;
    let r = relay(&t, "reaper", 3);
    assert_eq!(r.reap().await.unwrap(), 1);
    let reason = "lease expired (relay crashed claimed it at 2026-01-02T03:04:05.678901Z) \
                  after 3 attempts; max attempts reached";
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.messages WHERE status = 'dead' AND attempts = 3 \
               AND dead_at IS NOT NULL AND locked_by IS NULL AND locked_at IS NULL \
               AND dead_reason = '{reason}' AND last_error = '{reason}'"
        ))
        .await,
        1
    );
    assert_eq!(
        r.run_once().await.unwrap().claimed,
        0,
        "a dead row stays dead"
    );
}

#[tokio::test]
async fn an_expired_lease_below_max_attempts_backs_off_per_the_retry_policy() {
    let t = TestSchema::new("reap_failed").await;
    crashed_claim(&t, 2).await;
    let r = relay(&t, "reaper", 3);
    assert_eq!(r.reap().await.unwrap(), 1);
    // Attempt 2 failed: the second step, 600 s, not the first.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'failed' AND attempts = 2 \
               AND locked_by IS NULL AND locked_at IS NULL AND dead_at IS NULL \
               AND last_error = 'lease expired (relay crashed claimed it at \
                   2026-01-02T03:04:05.678901Z) after 2 attempts' \
               AND next_run_at BETWEEN now() + interval '599 s' AND now() + interval '601 s'"
        )
        .await,
        1
    );
    assert_eq!(
        r.run_once().await.unwrap().claimed,
        0,
        "not claimed again at once"
    );
    t.exec("UPDATE {schema}.messages SET next_run_at = now()")
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let again = r.run_once().await.unwrap();
    assert_eq!(
        (again.claimed, again.marked_sent),
        (1, 1),
        "claimed when due"
    );
}

#[tokio::test]
async fn a_live_lease_is_not_reaped() {
    let t = TestSchema::new("reap_live").await;
    crashed_claim(&t, 3).await;
    t.exec("UPDATE {schema}.messages SET locked_at = now()")
        .await;
    assert_eq!(relay(&t, "reaper", 3).reap().await.unwrap(), 0);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages WHERE status = 'processing'")
            .await,
        1
    );
}
