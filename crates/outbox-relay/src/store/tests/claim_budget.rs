//! What one claim loads is bounded whatever producers wrote: a batch stops
//! growing past its byte budget, and a row over the max message size is
//! never loaded, its message dead-lettered naming the limit. Both count the
//! whole row: payload, headers and the text columns.

use super::{claim, sink_relay, store};
use crate::publishers::postgres::PostgresPublisher;
use crate::store::ClaimParams;
use crate::{Relay, RelayConfig};
use outbox_testkit::TestSchema;

fn relay(t: &TestSchema, config: RelayConfig) -> Relay<PostgresPublisher> {
    sink_relay(t, "r", config)
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

/// A row's size as the claim counts it (`src/store/sql/claim.sql`).
const ROW_BYTES: &str = "(octet_length(payload::text) + octet_length(headers::text) \
     + octet_length(topic) + octet_length(event_type) + octet_length(aggregate_type) \
     + octet_length(aggregate_id))::int8";

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
    let row = t
        .count(&format!("SELECT max({ROW_BYTES}) FROM {{schema}}.messages"))
        .await;

    // The claim hands back its size, not its payload.
    let store = store(&t);
    let claimed = claim(&store, params(16 << 20, 1 << 20)).await;
    assert_eq!(claimed.messages.len(), 2);
    assert_eq!(claimed.unloadable.len(), 1);
    assert_eq!(
        claimed.unloadable[0].1,
        format!(
            "message of {row} bytes (payload {size} bytes) exceeds the limit of {} bytes",
            1 << 20
        )
    );
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
               AND dead_reason = 'message of {row} bytes (payload {size} bytes) exceeds the limit of {limit} bytes'"
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
        .count(&format!("SELECT max({ROW_BYTES}) FROM {{schema}}.messages"))
        .await;
    let store = store(&t);
    // Three fit, the fourth would pass the budget.
    let first = claim(&store, params(3 * each + each / 2, 1 << 20)).await;
    assert_eq!(first.messages.len(), 3);
    // A budget smaller than one payload still claims one.
    let second = claim(&store, params(1, 1 << 20)).await;
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

/// Headers count as much as a payload: twenty rows with 10 MiB headers
/// took 832 MiB with a 1 MiB batch budget when only payloads counted.
#[tokio::test]
async fn headers_and_text_columns_count_toward_both_limits() {
    let t = TestSchema::new("budget_headers").await;
    // Two rows of 600 kB headers, one of 3 MB headers, one 3 MB topic, all
    // with a tiny payload, then two small rows.
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers) \
         SELECT 'e', 'a', g::text, 't', '{}', jsonb_build_object('h', repeat('x', 600000)) \
           FROM generate_series(1, 2) g",
    )
    .await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers) \
         VALUES ('e', 'a', 'big-h', 't', '{}', jsonb_build_object('h', repeat('x', 3000000))), \
                ('e', 'a', 'big-t', repeat('t', 3000000), '{}', '{}')",
    )
    .await;
    insert(&t, 2, 10).await;
    let store = store(&t);
    // A 1 MB budget takes one 600 kB row per claim (the first is always
    // taken), never both.
    let first = claim(&store, params(1_000_000, 2 << 20)).await;
    assert_eq!((first.messages.len(), first.unloadable.len()), (1, 0));
    assert!(first.messages[0].headers["h"].len() == 600_000);
    t.exec("UPDATE {schema}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL, attempts = 0")
        .await;

    // Through the relay, with the defaults: the two 3 MB rows go dead
    // unloaded, named by their size; the rest are sent.
    let r = relay(&t, RelayConfig::default());
    let limit = RelayConfig::default().max_message_bytes;
    let mut sent = 0;
    for _ in 0..10 {
        sent += r.run_once().await.unwrap().marked_sent;
    }
    assert_eq!(sent, 4);
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.messages WHERE status = 'dead' \
               AND dead_reason LIKE 'message of % bytes (payload 2 bytes) exceeds the limit of {limit} bytes'"
        ))
        .await,
        2
    );
}
