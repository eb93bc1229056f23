//! The Kafka publisher against a real Kafka-protocol broker running as its
//! own process (Tansu; each test starts its own, on its own port and
//! storage: `outbox_testkit::Tansu`), through `outbox relay`, read back
//! with a client not written here (confluent-kafka in Python).

use crate::common;

use common::python;
use outbox_testkit::{Tansu, TestSchema};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MESSAGES: i64 = 2000;
const KEYS: i64 = 97;
const PARTITIONS: u32 = 6;

/// The Java client's partition for a key: `murmur2(key) & 0x7fffffff %
/// partitions` (Kafka's `Utils.murmur2`, checked below against Kafka's own
/// test vectors).
fn java_partition(key: &[u8], partitions: u32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions as i32
}

fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[test]
fn murmur2_is_kafkas() {
    for (s, want) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("abc", 479_470_107),
    ] {
        assert_eq!(murmur2(s.as_bytes()), want, "{s}");
    }
}

/// `outbox relay` on the test's schema, publishing to `broker`.
fn start_relay(db: &TestSchema, broker: &Tansu) -> Child {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", outbox_testkit::database_url())
        .env("OUTBOX_SCHEMA", db.name())
        .args(["relay", "--publisher"])
        .arg(format!("kafka://{}", broker.bootstrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Stops the relay with SIGINT and expects a clean exit.
fn stop_relay(mut relay: Child) {
    Command::new("kill")
        .args(["-INT", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(relay.wait().unwrap().success(), "a clean exit on SIGINT");
}

/// Waits until `sql` counts at least `want`, failing after `limit` or if
/// the relay exits; returns how long it took.
async fn wait_count(
    db: &TestSchema,
    relay: &mut Child,
    sql: &str,
    want: i64,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let n = db.count(sql).await;
        if n >= want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{n} of {want} after {limit:?}: {sql}"
        );
        assert!(relay.try_wait().unwrap().is_none(), "the relay exited");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Inserts `n` messages for `topic` as plain SQL would, over `keys`
/// aggregates (`order-0`…), payload `{"n": <g>}` with g from `from`.
async fn enqueue(db: &TestSchema, topic: &str, from: i64, n: i64, keys: i64) {
    db.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
           SELECT 'order.changed', 'order', 'order-' || (g % {keys}), '{topic}', \
                  jsonb_build_object('n', g) \
             FROM generate_series({from}, {to}) g",
        to = from + n - 1
    ))
    .await;
}

/// Every record of `topic` up to its high watermarks, read back by
/// confluent-kafka from offset 0.
fn read_back(broker: &Tansu, topic: &str, partitions: u32) -> Vec<serde_json::Value> {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/readback/kafka_readback.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(broker.bootstrap())
        .args([topic, &partitions.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\nbroker log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        broker.log()
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const SENT: &str = "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'";

/// 2,000 messages over 97 keys into a 6-partition topic through `outbox
/// relay`: each read back exactly once, keyed by the aggregate id, with the
/// envelope headers, in id order within each key, and every key on the
/// partition a Java producer would choose for it.
#[tokio::test]
async fn relay_to_a_kafka_broker_keeps_keys_headers_order_and_java_partitions() {
    let broker = Tansu::start();
    let db = TestSchema::new("relay_kafka").await;
    let topic = format!("orders_{}", db.name());
    broker.create_topic(&topic, PARTITIONS);
    enqueue(&db, &topic, 1, MESSAGES, KEYS).await;
    let mut relay = start_relay(&db, &broker);
    wait_count(&db, &mut relay, SENT, MESSAGES, Duration::from_secs(120)).await;
    stop_relay(relay);

    let records = read_back(&broker, &topic, PARTITIONS);
    assert_eq!(records.len() as i64, MESSAGES, "every message, once");
    let event_ids: BTreeSet<&str> = records
        .iter()
        .map(|r| r["headers"]["event_id"].as_str().expect("event_id header"))
        .collect();
    assert_eq!(event_ids.len() as i64, MESSAGES, "no duplicates");
    // Per key: one partition, Java's; offsets in the order of `n` (id order).
    let mut by_key: BTreeMap<String, Vec<(i64, i64, i64)>> = BTreeMap::new();
    for r in &records {
        let key = r["key"]
            .as_str()
            .expect("keyed by the aggregate id")
            .to_owned();
        assert_eq!(r["headers"]["aggregate_id"].as_str(), Some(key.as_str()));
        assert_eq!(r["headers"]["event_type"].as_str(), Some("order.changed"));
        by_key.entry(key).or_default().push((
            r["partition"].as_i64().unwrap(),
            r["offset"].as_i64().unwrap(),
            r["value"]["n"].as_i64().unwrap(),
        ));
    }
    assert_eq!(by_key.len() as i64, KEYS);
    for (key, mut recs) in by_key {
        let want = java_partition(key.as_bytes(), PARTITIONS) as i64;
        assert!(
            recs.iter().all(|r| r.0 == want),
            "{key}: partitions {:?}, Java's is {want}",
            recs.iter().map(|r| r.0).collect::<BTreeSet<_>>()
        );
        recs.sort_by_key(|r| r.1);
        let ns: Vec<i64> = recs.iter().map(|r| r.2).collect();
        let mut sorted = ns.clone();
        sorted.sort_unstable();
        assert_eq!(ns, sorted, "{key}: out of order in its partition");
    }
}

/// A topic the broker does not have (Tansu creates none on first use): its
/// messages go `dead` within 10 s with a reason naming it, and the other
/// messages of their batches are `sent` within a few seconds, not held for
/// the delivery timeout.
#[tokio::test]
async fn a_missing_topic_is_dead_within_seconds_and_holds_nothing_else() {
    let broker = Tansu::start();
    let db = TestSchema::new("relay_kafka_missing").await;
    let present = format!("present_{}", db.name());
    let absent = format!("absent_{}", db.name());
    broker.create_topic(&present, 1);
    // Interleaved: every batch holds both.
    for i in 0..60 {
        let topic = if i % 6 == 5 { &absent } else { &present };
        enqueue(&db, topic, i, 1, 7).await;
    }
    let started = Instant::now();
    let mut relay = start_relay(&db, &broker);
    wait_count(&db, &mut relay, SENT, 50, Duration::from_secs(5)).await;
    let sent = started.elapsed();
    let dead_sql = format!(
        "SELECT count(*) FROM {{schema}}.all_messages \
          WHERE status = 'dead' AND topic = '{absent}' AND dead_reason LIKE '%{absent}%'"
    );
    wait_count(
        &db,
        &mut relay,
        &dead_sql,
        10,
        Duration::from_secs(10) - sent,
    )
    .await;
    let dead = started.elapsed();
    eprintln!("50 sent {sent:?} and 10 dead {dead:?} after the relay's launch");
    stop_relay(relay);
    assert_eq!(read_back(&broker, &present, 1).len(), 50);
    assert_eq!(db.count(SENT).await, 50);
}

/// The broker crashes (SIGKILL) with messages flowing and comes back 8 s
/// later on the same storage: every message reaches it, none is
/// dead-lettered, and only at-least-once duplicates (counted) may appear.
#[tokio::test]
async fn an_8_s_broker_crash_loses_nothing_and_dead_letters_nothing() {
    const N: i64 = 500;
    let mut broker = Tansu::start();
    let db = TestSchema::new("relay_kafka_crash").await;
    let topic = format!("crash_{}", db.name());
    broker.create_topic(&topic, 3);
    let mut relay = start_relay(&db, &broker);
    enqueue(&db, &topic, 1, N / 2, 20).await;
    wait_count(&db, &mut relay, SENT, N / 2, Duration::from_secs(60)).await;

    broker.kill();
    enqueue(&db, &topic, N / 2 + 1, N / 2, 20).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    broker.restart();
    let back = wait_count(&db, &mut relay, SENT, N, Duration::from_secs(120)).await;
    eprintln!("all {N} sent {back:?} after the broker came back");
    stop_relay(relay);

    let dead = db
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
        .await;
    assert_eq!(dead, 0, "nothing dead-lettered");
    let records = read_back(&broker, &topic, 3);
    let ns: BTreeSet<i64> = records
        .iter()
        .map(|r| r["value"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ns,
        (1..=N).collect::<BTreeSet<_>>(),
        "every message reached the broker"
    );
    eprintln!("{} records for {N} messages", records.len());
}

/// `scripts/bench-publishers.sh kafka` reads the relay's Kafka figure
/// against the broker alone: scripts/kafka_produce.py producing the same
/// records with no database. Its records carry the relay's header names
/// (the broker's cost grows with each header), a key and a JSON body, so
/// the two figures compare like with like.
#[tokio::test]
async fn the_broker_alone_reference_produces_records_shaped_as_the_relays() {
    let broker = Tansu::start();
    let db = TestSchema::new("relay_kafka_ref").await;
    let (ours, reference) = (format!("ours_{}", db.name()), format!("ref_{}", db.name()));
    broker.create_topic(&ours, 1);
    broker.create_topic(&reference, 1);
    enqueue(&db, &ours, 1, 3, 3).await;
    let mut relay = start_relay(&db, &broker);
    wait_count(&db, &mut relay, SENT, 3, Duration::from_secs(60)).await;
    stop_relay(relay);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka_produce.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(broker.bootstrap())
        .args([reference.as_str(), "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rate: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(rate > 0.0);

    let names = |records: &[serde_json::Value]| -> BTreeSet<String> {
        assert_eq!(records.len(), 3);
        for r in records {
            assert!(r["key"].is_string() && r["value"].is_object(), "{r}");
        }
        records[0]["headers"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let relay_headers = names(&read_back(&broker, &ours, 1));
    assert_eq!(relay_headers.len(), 20, "{relay_headers:?}");
    assert_eq!(names(&read_back(&broker, &reference, 1)), relay_headers);
}

/// The figure's command runs as written, small: the relay's line and the
/// broker-alone line, each a rate (its own Tansu on port 19092).
#[test]
fn the_publishers_benchmark_runs_on_kafka_beside_the_broker_alone() {
    let stdout = common::bench_publishers("kafka", 300);
    for label in ["kafka", "kafka broker alone"] {
        assert!(common::bench_rate(&stdout, label) > 0.0, "{stdout}");
    }
}
