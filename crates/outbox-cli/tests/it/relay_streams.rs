//! `outbox relay --once` with a broker URL, end to end: 100 messages in a
//! fresh schema, the real binary, and the broker's own client (Python, in a
//! second process) reading back what arrived.

use crate::common;

use common::python;
use outbox::{Enqueued, NewMessage, Outbox};
use outbox_testkit::litter::Litter;
use outbox_testkit::TestSchema;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use uuid::Uuid;

const MESSAGES: usize = 100;

fn unique(label: &str) -> String {
    format!("{label}_{:08x}", rand::random::<u32>())
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
    relay_once_in(db.name(), publisher)
}

fn relay_once_in(schema: &str, publisher: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["--database-url", &outbox_testkit::database_url()])
        .args(["--schema", schema])
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
    let litter = Litter::default();
    litter.redis_keys(&redis, &format!("{prefix}*"));
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

/// README "Run the relay": `outbox relay --publisher redis://127.0.0.1:6379`
/// as written (the schema through `OUTBOX_SCHEMA`), running until SIGINT.
#[tokio::test]
async fn the_readme_relay_runs_against_redis_until_sigint() {
    let db = TestSchema::new("readme_redis").await;
    let topic = unique("readme_orders");
    let enqueued = enqueue(&db, &topic).await;
    let mut relay = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", outbox_testkit::database_url())
        .env("OUTBOX_SCHEMA", db.name())
        .args(["relay", "--publisher", "redis://127.0.0.1:6379"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sent = "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'";
    while db.count(sent).await < MESSAGES as i64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay did not send {MESSAGES} messages within 60 s"
        );
        assert!(relay.try_wait().unwrap().is_none(), "the relay exited");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Command::new("kill")
        .args(["-INT", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(relay.wait().unwrap().success(), "a clean exit on SIGINT");

    let entries = readback("redis_readback.py", &["redis://127.0.0.1:6379", &topic]);
    let got: BTreeSet<Uuid> = entries
        .iter()
        .map(|e| event_id(&e["fields"]["event_id"]))
        .collect();
    assert_eq!(
        got,
        ids(&enqueued),
        "the stream named by the topic holds them all"
    );
    // The stream is this test's own (a random topic); leave nothing behind.
    let _ = Command::new("redis-cli").args(["DEL", &topic]).output();
}

#[tokio::test]
async fn relay_once_to_nats_jetstream() {
    let db = TestSchema::new("relay_nats").await;
    let topic = unique("orders");
    let enqueued = enqueue(&db, &topic).await;
    let nats = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let prefix = unique("e2e");
    let stream = prefix.to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&stream);
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

#[tokio::test]
async fn relay_once_to_asynq() {
    let db = TestSchema::new("relay_asynq").await;
    let enqueued = enqueue(&db, &unique("email:welcome")).await;
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let queue = unique("outbox_e2e");
    let litter = Litter::default();
    litter.asynq_queue(&redis, &queue);
    let asynq = redis.replacen("redis://", "asynq://", 1);
    relay_once(&db, &format!("{asynq}?queue={queue}"));

    let tasks = readback("asynq_readback.py", &[&redis, &queue]);
    let got: BTreeSet<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    let want: BTreeSet<String> = enqueued
        .iter()
        .map(|e| format!("outbox:{}", e.id))
        .collect();
    assert_eq!(got, want, "one pending task per outbox row, id outbox:<id>");
    assert!(tasks
        .iter()
        .all(|t| t["state"] == "pending" && t["msg_bytes"].as_u64() > Some(0)));
}

/// No Kafka broker runs on the machine: librdkafka's mock cluster, started
/// in this test process, listens on a real port the relay binary connects to.
#[tokio::test]
async fn relay_once_to_kafka_mock_cluster() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
    use std::time::Duration;

    let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    let db = TestSchema::new("relay_kafka").await;
    let topic = unique("orders");
    cluster.create_topic(&topic, 1, 1).unwrap();
    let enqueued = enqueue(&db, &topic).await;
    let brokers = cluster.bootstrap_servers();
    let publisher = format!("kafka://{brokers}");
    // The binary blocks this thread; the mock broker runs on its own threads.
    tokio::task::spawn_blocking({
        let name = db.name().to_owned();
        move || relay_once_in(&name, &publisher)
    })
    .await
    .unwrap();

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", unique("readback"))
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = BTreeSet::new();
    // Bounded: every record is in the log already (the relay saw its ack).
    for _ in 0..300 {
        if got.len() == MESSAGES {
            break;
        }
        if let Some(r) = consumer.poll(Duration::from_millis(100)) {
            let r = r.unwrap();
            let headers = r.headers().unwrap();
            let id = headers
                .iter()
                .find(|h| h.key == "event_id")
                .unwrap()
                .value
                .unwrap();
            got.insert(std::str::from_utf8(id).unwrap().parse::<Uuid>().unwrap());
            assert!(r.key().is_some(), "keyed by aggregate_id");
        }
    }
    assert_eq!(
        got,
        ids(&enqueued),
        "the topic holds exactly the outbox rows' event ids"
    );
}
