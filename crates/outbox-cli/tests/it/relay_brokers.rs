//! `outbox relay --once` end to end, the real binary against the real
//! brokers: 100 committed rows in a fresh schema go out in one pass, and
//! each broker's own client (or, for webhooks, the receiving server) gets
//! exactly those event_ids.

use outbox::{NewMessage, Outbox};
use outbox_relay::publishers::http::WebhookSecret;
use outbox_testkit::webhook::Receiver;
use outbox_testkit::{database_url, readback, TestSchema};
use serde_json::json;

const N: usize = 100;

fn suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Commits `N` messages on `topic`; returns their event_ids, sorted.
async fn enqueue(schema: &TestSchema, topic: &str) -> Vec<String> {
    let mut client = schema.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let messages: Vec<NewMessage> = (0..N)
        .map(|i| {
            NewMessage::new("order.created", "order", i.to_string(), &json!({"i": i}))
                .unwrap()
                .topic(topic)
        })
        .collect();
    Outbox::with_schema(schema.schema.clone())
        .enqueue_many(&*tx, &messages)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let sql = format!(
        "SELECT event_id::text FROM {}.all_messages ORDER BY 1",
        schema.schema.quoted()
    );
    client
        .query(sql.as_str(), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Runs one relay pass; returns its summary line.
async fn relay_once(schema: &TestSchema, publisher: &str, env: &[(&str, &str)]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["relay", "--once", "--publisher", publisher])
        .args(["--batch-size", &N.to_string(), "--schema", schema.name()])
        .env("DATABASE_URL", database_url())
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run outbox");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success(),
        "outbox relay failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

const ALL_SENT: &str = "claimed=100 published=100 marked_sent=100 failed=0";

#[tokio::test]
async fn relay_once_into_rabbitmq() {
    let schema = TestSchema::new("e2e_amqp").await;
    let exchange = format!("outbox_e2e_{}", suffix());
    let topic = format!("orders.{}", suffix());
    let expected = enqueue(&schema, &topic).await;
    let reader = readback::amqp(&exchange, "#", N).await;
    let url = format!("amqp://guest:guest@127.0.0.1:5672/%2f?exchange={exchange}");
    assert_eq!(relay_once(&schema, &url, &[]).await, ALL_SENT);
    let got = reader.finish().await;
    let ids = got
        .iter()
        .map(|d| d["properties"]["message_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sorted(ids), expected);
}

#[tokio::test]
async fn relay_once_into_mosquitto() {
    let schema = TestSchema::new("e2e_mqtt").await;
    let prefix = format!("outbox-e2e/{}", suffix());
    let expected = enqueue(&schema, "orders.created").await;
    let reader = readback::mqtt(&format!("{prefix}/#"), N).await;
    let url = format!("mqtt://127.0.0.1:1883?prefix={prefix}");
    assert_eq!(relay_once(&schema, &url, &[]).await, ALL_SENT);
    let got = reader.finish().await;
    let ids = got
        .iter()
        .map(|d| d["body"]["event_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sorted(ids), expected);
}

#[tokio::test]
async fn relay_once_into_a_webhook() {
    let schema = TestSchema::new("e2e_http").await;
    let expected = enqueue(&schema, "orders.created").await;
    let rx = Receiver::start().await;
    let secret = "whsec_c2VjcmV0LWZvci10aGUtZTJlLXRlc3Q=";
    let line = relay_once(&schema, &rx.url, &[("OUTBOX_WEBHOOK_SECRET", secret)]).await;
    assert_eq!(line, ALL_SENT);
    let got = rx.received();
    let key = WebhookSecret::parse(secret).unwrap();
    for r in &got {
        let ts = r.timestamp.parse().unwrap();
        assert!(key.verify(
            &r.id,
            ts,
            r.body.as_bytes(),
            r.signature.as_deref().unwrap()
        ));
        assert_eq!(r.json()["id"], r.id.as_str());
    }
    let ids = got.into_iter().map(|r| r.id).collect();
    assert_eq!(sorted(ids), expected);
}
