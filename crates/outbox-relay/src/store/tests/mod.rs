//! The store's statements on the real PostgreSQL, where a test must reach
//! what is private to the engine: the statements' text (their plans, and
//! what they read, under EXPLAIN), the claim's parameters, and the bucket
//! leases behind per-aggregate order. Each test makes its own schema
//! (`outbox_testkit::TestSchema`).

mod buckets;
mod claim_budget;
mod claim_cost;
mod stats_plans;

use super::sql::Queries;
use super::{ClaimParams, Claimed, Store};
use crate::publishers::postgres::PostgresPublisher;
use crate::{Relay, RelayConfig};
use outbox::{NewMessage, Outbox};
use outbox_testkit::TestSchema;
use serde_json::json;

/// The text of the store's statements for `t`'s schema.
fn statements(t: &TestSchema) -> Queries {
    Queries::new(&t.schema)
}

/// A store over `t`'s schema.
fn store(t: &TestSchema) -> Store {
    Store::new(t.pool.clone(), t.schema.clone())
}

/// One claim, decoded as the relay decodes it.
async fn claim(store: &Store, p: ClaimParams<'_>) -> Claimed {
    store.claim_rows(p).await.unwrap().decode()
}

/// Enqueues one message per `(aggregate id, n)`, in this order, aggregate
/// type `order`; returns the ids.
async fn enqueue_rows(t: &TestSchema, rows: &[(String, i64)]) -> Vec<i64> {
    let msgs: Vec<NewMessage> = rows
        .iter()
        .map(|(agg, n)| {
            NewMessage::new(
                "order.changed",
                "order",
                agg.clone(),
                &json!({"agg": agg, "n": n}),
            )
            .unwrap()
            .topic("orders")
        })
        .collect();
    enqueue(t, &msgs).await
}

/// `n` rows of aggregate `agg`, numbered from 0.
fn of(agg: &str, n: usize) -> Vec<(String, i64)> {
    (0..n as i64).map(|i| (agg.to_owned(), i)).collect()
}

/// `n` messages on `topic`, aggregate `thing`/`i` for i in 0..n.
async fn enqueue_n(t: &TestSchema, n: usize, topic: &str) -> Vec<i64> {
    let msgs: Vec<NewMessage> = (0..n)
        .map(|i| {
            NewMessage::new("thing.happened", "thing", i.to_string(), &json!({"i": i}))
                .unwrap()
                .topic(topic)
        })
        .collect();
    enqueue(t, &msgs).await
}

async fn enqueue(t: &TestSchema, msgs: &[NewMessage]) -> Vec<i64> {
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = t.pool.get().await.unwrap();
    let mut ids = Vec::with_capacity(msgs.len());
    for chunk in msgs.chunks(1000) {
        let got = outbox.enqueue_many(&**client, chunk).await.unwrap();
        ids.extend(got.iter().map(|e| e.id));
    }
    ids
}

/// A relay `relay_id` publishing to the outbox database's sink.
fn sink_relay(t: &TestSchema, relay_id: &str, config: RelayConfig) -> Relay<PostgresPublisher> {
    let config = RelayConfig {
        relay_id: relay_id.to_owned(),
        ..config
    };
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, relay_id);
    Relay::new(store(t), publisher, config).unwrap()
}

#[test]
fn any_age_the_database_returns_is_a_duration() {
    use super::age_seconds;
    use std::time::Duration;
    assert_eq!(age_seconds(1.5), Duration::from_millis(1500));
    assert_eq!(age_seconds(-3.0), Duration::ZERO);
    assert_eq!(age_seconds(f64::NAN), Duration::ZERO);
    assert_eq!(age_seconds(f64::INFINITY), Duration::MAX);
    assert_eq!(age_seconds(1e300), Duration::MAX);
}
