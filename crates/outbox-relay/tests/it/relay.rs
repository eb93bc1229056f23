//! The relay engine on the real PostgreSQL: claims are leases, settlement is
//! guarded, nothing rolled back is published, nothing committed is lost.
//! A destination that fails: `relay_failures.rs`.

use crate::support;

use outbox::{Delivery, Inbox};
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::relay::Ordering;
use outbox_relay::{Relay, RelayConfig, RetryPolicy};
use outbox_testkit::TestSchema;
use std::time::Duration;
use support::{enqueue_n as enqueue, sink_relay as relay};

/// The reaper counts an expired lease as a failed attempt: with no
/// backoff, a reaped row is claimable again at once.
fn no_backoff() -> RetryPolicy {
    RetryPolicy {
        schedule: vec![Duration::ZERO],
        ..RetryPolicy::default()
    }
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
    // relay would own its own aggregates (tests/it/ordering.rs).
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
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status <> 'sent'")
            .await,
        0
    );
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
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'processing'")
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
        let event_id = event_id.parse().unwrap();
        outcomes.push(inbox.record(&*tx, event_id, &topic).await.unwrap());
        tx.commit().await.unwrap();
    }
    assert_eq!(outcomes, [Delivery::First, Delivery::Duplicate]);
}
