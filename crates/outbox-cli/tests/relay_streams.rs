//! `outbox relay --once` with a broker URL, end to end: 100 messages in a
//! fresh schema, the real binary, and the broker's own client (Python, in a
//! second process) reading back what arrived.

use outbox::{Enqueued, NewMessage, Outbox};
use outbox_testkit::TestSchema;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use uuid::Uuid;

const MESSAGES: usize = 100;

fn unique(label: &str) -> String {
    format!("{label}_{:08x}", rand::random::<u32>())
}

/// The virtualenv scripts/test.sh prepares (`OUTBOX_TEST_PYTHON`).
fn python() -> PathBuf {
    let path = std::env::var_os("OUTBOX_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pyenv/bin/python")
        });
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh once to create the read-back virtualenv",
        path.display()
    );
    path
}

/// Runs `tests/readback/<script>` and parses its JSON lines.
fn readback(script: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/readback")
        .join(script);
    let out = Command::new(python())
        .arg(&script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

async fn enqueue(db: &TestSchema, topic: &str) -> Vec<Enqueued> {
    let outbox = Outbox::with_schema(db.schema.clone());
    let messages: Vec<NewMessage> = (0..MESSAGES)
        .map(|n| {
            NewMessage::new(
                "order.created",
                "order",
                n.to_string(),
                &serde_json::json!({"n": n}),
            )
            .unwrap()
            .topic(topic)
            .header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
        })
        .collect();
    let client = db.pool.get().await.unwrap();
    outbox.enqueue_many(&**client, &messages).await.unwrap()
}

/// `outbox relay --once --publisher URL --batch-size 100` on the test schema.
fn relay_once(db: &TestSchema, publisher: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["--database-url", &outbox_testkit::database_url()])
        .args(["--schema", db.name()])
        .args(["relay", "--once", "--publisher", publisher])
        .args(["--batch-size", &MESSAGES.to_string()])
        .output()
        .expect("run outbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "relay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        format!("claimed={MESSAGES} published={MESSAGES} marked_sent={MESSAGES} failed=0")
    );
}

fn ids(enqueued: &[Enqueued]) -> BTreeSet<Uuid> {
    enqueued.iter().map(|e| e.event_id).collect()
}

fn event_id(v: &serde_json::Value) -> Uuid {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .expect("an event_id")
}

#[tokio::test]
async fn relay_once_to_redis_streams() {
    let db = TestSchema::new("relay_redis").await;
    let topic = unique("orders");
    let enqueued = enqueue(&db, &topic).await;
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("{}:", unique("outbox_e2e"));
    relay_once(&db, &format!("{redis}?stream_prefix={prefix}"));

    let entries = readback("redis_readback.py", &[&redis, &format!("{prefix}{topic}")]);
    assert_eq!(entries.len(), MESSAGES);
    let got: BTreeSet<Uuid> = entries
        .iter()
        .map(|e| event_id(&e["fields"]["event_id"]))
        .collect();
    assert_eq!(
        got,
        ids(&enqueued),
        "the stream holds exactly the outbox rows' event ids"
    );
    let sent = db
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await;
    assert_eq!(sent, MESSAGES as i64);
}

#[tokio::test]
async fn relay_once_to_nats_jetstream() {
    let db = TestSchema::new("relay_nats").await;
    let topic = unique("orders");
    let enqueued = enqueue(&db, &topic).await;
    let nats = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let prefix = unique("e2e");
    let stream = prefix.to_uppercase();
    relay_once(
        &db,
        &format!("{nats}?subject_prefix={prefix}.&create_stream={stream}"),
    );

    let messages = readback("nats_readback.py", &[&nats, &stream]);
    assert_eq!(messages.len(), MESSAGES);
    for m in &messages {
        assert_eq!(m["subject"], format!("{prefix}.{topic}"));
        assert_eq!(m["headers"]["Nats-Msg-Id"], m["headers"]["event_id"]);
    }
    let got: BTreeSet<Uuid> = messages
        .iter()
        .map(|m| event_id(&m["headers"]["event_id"]))
        .collect();
    assert_eq!(
        got,
        ids(&enqueued),
        "the stream holds exactly the outbox rows' event ids"
    );
    let sent = db
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await;
    assert_eq!(sent, MESSAGES as i64);
}
