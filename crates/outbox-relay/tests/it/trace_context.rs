//! A W3C trace context set at enqueue reaches the destination: here the
//! PostgreSQL sink, whose `headers` column a consumer reads. Broker
//! publishers carry the same headers in their envelope (see `envelope.rs`).

use outbox::{NewMessage, Outbox};
use outbox_relay::publishers::postgres::{published_after, PostgresPublisher};
use outbox_relay::{Relay, RelayConfig, Store};
use outbox_testkit::TestSchema;
use serde_json::json;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn traceparent_set_at_enqueue_is_published_with_the_message() {
    let t = TestSchema::new("trace_context").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let msg = NewMessage::new("order.created", "order", "7", &json!({"order_id": 7}))
        .unwrap()
        .topic("orders")
        .header("tenant", "acme")
        .trace_context(PARENT, Some("rojo=00f067aa0ba902b7"))
        .unwrap();
    let client = t.pool.get().await.unwrap();
    outbox.enqueue(&**client, &msg).await.unwrap();

    let relay = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        PostgresPublisher::new(t.pool.clone(), &t.schema, "trace"),
        RelayConfig::default(),
    )
    .unwrap();
    assert_eq!(relay.run_once().await.unwrap().marked_sent, 1);

    let rows = published_after(&client, &t.schema, 0).await.unwrap();
    assert_eq!(rows.len(), 1);
    let headers = &rows[0].headers;
    assert_eq!(headers["traceparent"], PARENT);
    assert_eq!(headers["tracestate"], "rojo=00f067aa0ba902b7");
    assert_eq!(headers["tenant"], "acme");
}

#[test]
fn malformed_traceparent_is_refused_before_anything_is_written() {
    let m = NewMessage::new("e", "a", "1", &1).unwrap();
    let err = m
        .clone()
        .trace_context("00-xyz-00f067aa0ba902b7-01", None)
        .unwrap_err();
    assert!(err.to_string().contains("traceparent"), "{err}");
    assert!(m.trace_context(PARENT, Some("bad\u{1}state")).is_err());
}
