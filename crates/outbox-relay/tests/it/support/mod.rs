//! Shared by the publisher tests: sample messages and the checks every
//! broker's read-back must pass. Kept free of any one broker so a
//! conformance harness can call it.

pub mod scripted;

use chrono::{SubsecRound, Utc};
use outbox_relay::{Message, Outcome};
use serde_json::json;

/// A random suffix for exchange, queue and topic names.
pub fn suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// `n` messages on `topic` with every envelope field set, including a
/// header that is a CloudEvents extension name and one that is not, and a
/// payload with nesting and non-ASCII text.
pub fn messages(n: usize, topic: &str) -> Vec<Message> {
    let base = rand::random::<u32>() as i64;
    (0..n)
        .map(|i| Message {
            id: base + i as i64,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".into(),
            event_version: 3,
            aggregate_type: "order".into(),
            aggregate_id: format!("ord-{i}"),
            topic: topic.into(),
            payload: json!({"order_id": i, "total": 1999, "note": "naïve café ✓", "lines": [{"sku": "a", "qty": 2}]}).into(),
            headers: [
                ("traceparent".to_owned(), format!("00-{:032x}-{:016x}-01", i + 1, i + 1)),
                ("X-Tenant".to_owned(), "acme".to_owned()),
            ]
            .into(),
            attempts: 1,
            created_at: Utc::now().trunc_subsecs(6),
        })
        .collect()
}

/// Panics unless every outcome is `Ok`.
pub fn assert_all_ok(outcomes: &[Outcome]) {
    for (i, o) in outcomes.iter().enumerate() {
        assert!(o.is_ok(), "message {i}: {o:?}");
    }
}

/// The message whose event_id is `id`.
pub fn by_event_id<'a>(batch: &'a [Message], id: &str) -> &'a Message {
    batch
        .iter()
        .find(|m| m.event_id.to_string() == id)
        .unwrap_or_else(|| panic!("no message with event_id {id}"))
}

/// Aggregates in [`relay_in_aggregate_order`].
pub const AGGREGATES: usize = 50;
/// Messages per aggregate in [`relay_in_aggregate_order`].
pub const PER_AGGREGATE: usize = 40;

/// Enqueues [`AGGREGATES`] × [`PER_AGGREGATE`] messages on `topic`, the
/// aggregates interleaved (`{"agg": "agg-<a>", "n": <n>}`, n rising with
/// the id in each aggregate), and relays them with ordering on: one relay,
/// 4 pipelines, batch 500, so batches carry long chains of an aggregate
/// and pipelines race for the same aggregates. Returns once every message
/// is sent (none dead); the schema is returned to keep it until the test
/// ends.
pub async fn relay_in_aggregate_order<P: outbox_relay::Publisher>(
    label: &str,
    publisher: P,
    topic: &str,
) -> outbox_testkit::TestSchema {
    use std::time::{Duration, Instant};
    let t = outbox_testkit::TestSchema::new(label).await;
    let msgs: Vec<outbox::NewMessage> = (0..PER_AGGREGATE)
        .flat_map(|n| {
            (0..AGGREGATES).map(move |a| {
                let agg = format!("agg-{a}");
                outbox::NewMessage::new(
                    "order.changed",
                    "order",
                    agg.clone(),
                    &json!({"agg": agg, "n": n}),
                )
                .unwrap()
                .topic(topic)
            })
        })
        .collect();
    let client = t.pool.get().await.unwrap();
    outbox::Outbox::with_schema(t.schema.clone())
        .enqueue_many(&**client, &msgs)
        .await
        .unwrap();
    let store = outbox_relay::Store::new(outbox_testkit::pool(8), t.schema.clone());
    let config = outbox_relay::RelayConfig {
        batch_size: 500,
        concurrency: 4,
        notify: false,
        idle_sleep: Duration::from_millis(20),
        ..Default::default()
    };
    let relay = outbox_relay::Relay::new(store, publisher, config).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let began = Instant::now();
    let wait = async {
        while outbox_testkit::ordering::live_messages(&t).await > 0 {
            if began.elapsed() > Duration::from_secs(120) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
    };
    let (ran, ()) = tokio::join!(relay.run(stop.clone()), wait);
    ran.unwrap();
    let sent = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await;
    assert_eq!(
        sent as usize,
        AGGREGATES * PER_AGGREGATE,
        "all sent within 120 s, none dead"
    );
    assert_eq!(outbox_testkit::ordering::sent_order_violations(&t).await, 0);
    t
}

/// `(aggregate, n)` from a delivered payload of [`relay_in_aggregate_order`].
pub fn agg_and_n(payload: &serde_json::Value) -> (String, i64) {
    (
        payload["agg"].as_str().expect("agg").to_owned(),
        payload["n"].as_i64().expect("n"),
    )
}

/// Per aggregate, the first occurrences of its messages came in order and
/// every message arrived: what a consumer of [`relay_in_aggregate_order`]
/// must see.
pub fn assert_aggregate_order(got: &[(String, i64)]) {
    let bad = outbox_testkit::ordering::first_deliveries_out_of_order(got);
    assert!(bad.is_empty(), "aggregates out of order: {bad:?}");
    let mut per: std::collections::HashMap<&str, std::collections::HashSet<i64>> =
        Default::default();
    for (a, n) in got {
        per.entry(a.as_str()).or_default().insert(*n);
    }
    assert_eq!(per.len(), AGGREGATES, "every aggregate arrived");
    for (a, ns) in per {
        assert_eq!(ns.len(), PER_AGGREGATE, "every message of {a} arrived");
    }
}

/// As [`assert_aggregate_order`], for the aggregates that are there only
/// (one Kafka partition).
pub fn assert_aggregate_order_in(got: &[(String, i64)]) {
    let bad = outbox_testkit::ordering::first_deliveries_out_of_order(got);
    assert!(bad.is_empty(), "aggregates out of order: {bad:?}");
}

/// Enqueues one message per `(aggregate id, n)`, in this order, aggregate
/// type `order`; returns the ids.
pub async fn enqueue_rows(t: &outbox_testkit::TestSchema, rows: &[(String, i64)]) -> Vec<i64> {
    let outbox = outbox::Outbox::with_schema(t.schema.clone());
    let client = t.pool.get().await.unwrap();
    let msgs: Vec<outbox::NewMessage> = rows
        .iter()
        .map(|(agg, n)| {
            outbox::NewMessage::new(
                "order.changed",
                "order",
                agg.clone(),
                &json!({"agg": agg, "n": n}),
            )
            .unwrap()
            .topic("orders")
        })
        .collect();
    let mut ids = Vec::with_capacity(rows.len());
    for chunk in msgs.chunks(1000) {
        let got = outbox.enqueue_many(&**client, chunk).await.unwrap();
        ids.extend(got.iter().map(|e| e.id));
    }
    ids
}

pub fn of(agg: &str, n: usize) -> Vec<(String, i64)> {
    (0..n as i64).map(|i| (agg.to_owned(), i)).collect()
}

/// A relay `relay_id` publishing to the outbox database's sink.
pub fn sink_relay(
    t: &outbox_testkit::TestSchema,
    relay_id: &str,
    config: outbox_relay::RelayConfig,
) -> outbox_relay::Relay<outbox_relay::publishers::postgres::PostgresPublisher> {
    use outbox_relay::publishers::postgres::PostgresPublisher;
    use outbox_relay::{Relay, RelayConfig, Store};
    let config = RelayConfig {
        relay_id: relay_id.to_owned(),
        ..config
    };
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, relay_id);
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
}

/// `n` messages on `topic`, aggregate `thing`/`i` for i in 0..n.
pub async fn enqueue_n(t: &outbox_testkit::TestSchema, n: usize, topic: &str) -> Vec<i64> {
    use outbox::{NewMessage, Outbox};
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
