//! What one claim loads is bounded whatever producers wrote: a batch stops
//! growing past its byte budget, and a payload over the max message size
//! is never loaded, its message dead-lettered naming the limit.

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::store::ClaimParams;
use outbox_relay::{Relay, RelayConfig, Store};
use outbox_testkit::TestSchema;

fn relay(t: &TestSchema, config: RelayConfig) -> Relay<PostgresPublisher> {
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, "r");
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        RelayConfig {
            relay_id: "r".into(),
            ..config
        },
    )
    .unwrap()
}

/// `n` rows by plain SQL, each payload `{"pad": "<bytes x's>"}`.
async fn insert(t: &TestSchema, n: usize, bytes: usize) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', g::text, 't', jsonb_build_object('pad', repeat('x', {bytes})) \
           FROM generate_series(1, {n}) g"
    ))
    .await;
}

fn params(max_batch_bytes: i64, max_message_bytes: i64) -> ClaimParams<'static> {
    ClaimParams {
        limit: 500,
        relay_id: "r",
        from_id: i64::MIN,
        max_batch_bytes,
        max_message_bytes,
        ordered: None,
    }
}

#[tokio::test]
async fn a_fifty_megabyte_payload_goes_dead_unloaded_and_the_rest_are_sent() {
    let t = TestSchema::new("budget_huge").await;
    insert(&t, 1, 10).await;
    insert(&t, 1, 50 << 20).await;
    insert(&t, 1, 10).await;
    let size = t
        .count("SELECT max(octet_length(payload::text))::int8 FROM {schema}.messages")
        .await;
    assert!(size > 50 << 20);

    // The claim hands back its size, not its payload.
    let store = Store::new(t.pool.clone(), t.schema.clone());
    let claimed = store
        .claim_messages(params(16 << 20, 1 << 20))
        .await
        .unwrap();
    assert_eq!(claimed.messages.len(), 2);
    assert_eq!(claimed.too_large.len(), 1);
    assert_eq!(claimed.too_large[0].1, size);
    t.exec("UPDATE {schema}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL, attempts = 0")
        .await;

    let r = relay(&t, RelayConfig::default());
    let limit = RelayConfig::default().max_message_bytes;
    let stats = r.run_once().await.unwrap();
    assert_eq!(
        (
            stats.claimed,
            stats.published,
            stats.marked_sent,
            stats.failed,
            stats.dead
        ),
        (3, 2, 2, 1, 1)
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.messages WHERE status = 'dead' AND dead_at IS NOT NULL \
               AND dead_reason = 'payload of {size} bytes exceeds the limit of {limit} bytes'"
        ))
        .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await,
        2
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        2
    );
}

#[tokio::test]
async fn the_byte_budget_splits_a_batch_and_always_takes_one_row() {
    let t = TestSchema::new("budget_split").await;
    insert(&t, 10, 1000).await;
    let each = t
        .count("SELECT max(octet_length(payload::text))::int8 FROM {schema}.messages")
        .await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    // Three fit, the fourth would pass the budget.
    let first = store
        .claim_messages(params(3 * each + each / 2, 1 << 20))
        .await
        .unwrap();
    assert_eq!(first.messages.len(), 3);
    // A budget smaller than one payload still claims one.
    let second = store.claim_messages(params(1, 1 << 20)).await.unwrap();
    assert_eq!(second.messages.len(), 1);
    assert!(second.messages[0].id > first.messages[2].id);
    // The rows past the budget were not claimed: still pending, untouched.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages WHERE status = 'pending' AND attempts = 0")
            .await,
        6
    );

    // The same through the relay's setting.
    let r = relay(
        &t,
        RelayConfig {
            max_batch_bytes: (2 * each) as usize,
            ..RelayConfig::default()
        },
    );
    assert_eq!(r.run_once().await.unwrap().marked_sent, 2);
}
