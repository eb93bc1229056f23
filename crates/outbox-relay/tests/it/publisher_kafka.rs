//! The Kafka publisher against two brokers: librdkafka's mock cluster (an
//! in-process broker speaking the Kafka protocol, which can be told to fail
//! in ways a real broker cannot be made to), and Tansu, a Kafka-protocol
//! broker running as its own process (see docs/publishers-a.md). The
//! conformance suite runs on both; each harness starts its own broker.
#![cfg(feature = "publisher-kafka")]

use crate::conformance;
use crate::support;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::kafka::KafkaPublisher;
use outbox_relay::Envelope;
use outbox_testkit::Tansu;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use std::time::Duration;

/// A record as consumed: key, headers, value.
type Record = (Option<String>, Vec<(String, String)>, String);

/// The broker a harness publishes to.
enum Broker {
    Mock(MockCluster<'static, DefaultProducerContext>),
    Tansu(Tansu),
}

struct KafkaHarness {
    broker: Broker,
}

impl KafkaHarness {
    /// On librdkafka's mock cluster.
    fn new() -> Self {
        Self {
            broker: Broker::Mock(MockCluster::new(1).expect("mock cluster")),
        }
    }

    /// On a Tansu broker process of its own.
    fn tansu() -> Self {
        Self {
            broker: Broker::Tansu(Tansu::start()),
        }
    }

    fn bootstrap(&self) -> String {
        match &self.broker {
            Broker::Mock(c) => c.bootstrap_servers(),
            Broker::Tansu(t) => t.bootstrap(),
        }
    }

    fn url(&self) -> String {
        format!("kafka://{}", self.bootstrap())
    }

    /// A fresh topic of one partition.
    fn topic(&self, label: &str) -> String {
        self.topic_of(label, 1)
    }

    /// A fresh topic of `partitions` partitions.
    fn topic_of(&self, label: &str, partitions: i32) -> String {
        let topic = unique(label);
        match &self.broker {
            Broker::Mock(c) => c.create_topic(&topic, partitions, 1).expect("create topic"),
            Broker::Tansu(t) => t.create_topic(&topic, partitions as u32),
        }
        topic
    }

    /// Every record of `topic` (one partition), oldest first, as the
    /// consumer sees them; the high watermark says how many to expect.
    fn records(&self, topic: &str) -> Vec<Record> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", unique("readback"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let (low, high) = consumer
            .fetch_watermarks(topic, 0, Duration::from_secs(10))
            .expect("watermarks");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let want = usize::try_from(high - low).unwrap();
        let mut out = Vec::new();
        // Bounded: the records are there (the watermark says so); polls only
        // wait for the fetch to come back.
        for _ in 0..200 {
            if out.len() == want {
                break;
            }
            if let Some(r) = consumer.poll(Duration::from_millis(100)) {
                out.push(decode(&r.expect("consume")));
            }
        }
        assert_eq!(
            out.len(),
            want,
            "read every record up to the high watermark"
        );
        out
    }
}

fn decode(m: &BorrowedMessage<'_>) -> Record {
    let key = m.key().map(|k| String::from_utf8(k.to_vec()).unwrap());
    let headers = m
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let body = String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap();
    (key, headers, body)
}

impl Harness for KafkaHarness {
    type P = KafkaPublisher;
    const DEDUPES: bool = false;

    async fn target(&self) -> Target<KafkaPublisher> {
        Target {
            publisher: KafkaPublisher::from_url(&self.url()).unwrap(),
            topic: self.topic("orders"),
        }
    }

    async fn read_back(&self, _: &Target<KafkaPublisher>, topic: &str) -> Vec<Received> {
        self.records(topic)
            .into_iter()
            .map(|(key, headers, body)| {
                let e = Envelope::from_fields(
                    headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .chain([("payload", body.as_str())]),
                )
                .expect("headers and value decode");
                assert_eq!(
                    key.as_deref(),
                    Some(e.aggregate_id.as_str()),
                    "key = aggregate_id"
                );
                Received {
                    event_id: e.event_id,
                    payload: e.payload.to_value().unwrap(),
                    envelope: Some(e),
                }
            })
            .collect()
    }

    async fn unreachable(&self) -> KafkaPublisher {
        let url = format!("kafka://127.0.0.1:{}?message_timeout=1s", closed_port());
        KafkaPublisher::from_url(&url).unwrap()
    }

    async fn refused_topic(&self, _: &Target<KafkaPublisher>) -> (String, Scope) {
        match &self.broker {
            // The mock cluster can refuse a topic it has: not authorized.
            Broker::Mock(c) => {
                let topic = self.topic("forbidden");
                c.topic_error(
                    &topic,
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                )
                .unwrap();
                (topic, Scope::Topic)
            }
            // Tansu creates no topic on first use: one it lacks is refused.
            Broker::Tansu(_) => (unique("absent"), Scope::Topic),
        }
    }
}

conformance_suite!(KafkaHarness::new());

/// The same suite against a real broker process.
mod on_tansu {
    use super::{conformance, KafkaHarness};
    crate::conformance_suite!(KafkaHarness::tansu());
}

#[tokio::test]
async fn ce_headers_follow_the_kafka_binding() {
    let h = KafkaHarness::new();
    let t = h.target().await;
    let m = conformance::message(&t.topic, 1);
    assert!(
        outbox_relay::Publisher::publish(&t.publisher, std::slice::from_ref(&m)).await[0].is_ok()
    );
    let (_, headers, body) = h.records(&t.topic).remove(0);
    let get = |k: &str| {
        headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("ce_id"), Some(m.event_id.to_string().as_str()));
    assert_eq!(get("ce_type"), Some("order.created"));
    assert_eq!(get("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        m.payload.to_value().unwrap()
    );
}

/// One message over message.max.bytes (the producer's, 1000000 by
/// default), with an invalid topic name, or on an internal topic fails
/// alone with a reason naming the limit; the 20 others are on the topic.
#[tokio::test]
async fn bad_messages_fail_alone() {
    let h = KafkaHarness::new();
    for (topic, reason) in [
        (None, "Kafka producer message.max.bytes is 1000000"),
        (Some("bad topic!".to_owned()), "is invalid"),
        (Some("t".repeat(250)), "is invalid"),
        (
            Some("__consumer_offsets".to_owned()),
            "reserved prefix \"__\"",
        ),
    ] {
        let t = h.target().await;
        let mut bad = conformance::message(topic.as_deref().unwrap_or(&t.topic), 99);
        if topic.is_none() {
            bad.payload = serde_json::json!({ "blob": "x".repeat(1_000_001) }).into();
        }
        conformance::bad_message_fails_alone(&h, &t, bad, reason).await;
    }
}

/// message.max.bytes given in the URL is the limit checked.
#[tokio::test]
async fn message_max_bytes_comes_from_the_producer_config() {
    let h = KafkaHarness::new();
    let t = Target {
        publisher: KafkaPublisher::from_url(&format!("{}?message.max.bytes=5000", h.url()))
            .unwrap(),
        topic: h.topic("small"),
    };
    let mut bad = conformance::message(&t.topic, 99);
    bad.payload = serde_json::json!({ "blob": "x".repeat(6_000) }).into();
    conformance::bad_message_fails_alone(&h, &t, bad, "message.max.bytes is 5000").await;
}

/// A topic that does not exist, on a broker that does not create topics
/// (here the client asks it not to): its messages fail at once,
/// permanently, with a reason naming the topic, and the rest of the batch
/// is delivered. librdkafka alone would hold them until its message
/// timeout (30 s) and report a generic retryable timeout.
#[tokio::test]
async fn a_missing_topic_fails_its_messages_at_once_and_alone() {
    let h = KafkaHarness::new();
    let publisher =
        KafkaPublisher::from_url(&format!("{}?allow.auto.create.topics=false", h.url())).unwrap();
    let present = h.topic("present");
    let absent = unique("absent");
    let batch: Vec<_> = (0..60)
        .map(|i| conformance::message(if i % 6 == 5 { &absent } else { &present }, i))
        .collect();
    let started = std::time::Instant::now();
    let outcomes = outbox_relay::Publisher::publish(&publisher, &batch).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the batch took {took:?}");
    for (m, o) in batch.iter().zip(&outcomes) {
        if m.topic == absent {
            let e = o.as_ref().expect_err("a message for the missing topic");
            assert!(!e.is_retryable(), "permanent: {e:?}");
            assert!(e.message.contains(&absent), "names the topic: {e:?}");
        } else {
            assert!(o.is_ok(), "{o:?}");
        }
    }
    assert_eq!(h.records(&present).len(), 50);
    // The answer is remembered: the next batch asks nothing and fails the
    // same way at once.
    let again = outbox_relay::Publisher::publish(&publisher, &batch[5..6]).await;
    assert!(again[0].as_ref().is_err_and(|e| !e.is_retryable()));
}

/// A topic whose partition leader answers slowly holds only its own
/// messages: through the relay, the messages of a healthy topic in the same
/// batch are marked sent from their delivery reports while the slow
/// topic's are still in flight (issue 16). The broker of the slow topic
/// takes 3 s per round trip in the mock cluster.
#[tokio::test]
async fn a_slow_topic_holds_only_its_own_messages() {
    let cluster: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(2).expect("mock cluster");
    let (fast, slow) = (unique("fast"), unique("slow"));
    for (topic, broker) in [(&fast, 1), (&slow, 2)] {
        cluster.create_topic(topic, 1, 1).expect("create topic");
        cluster
            .partition_leader(topic, 0, Some(broker))
            .expect("leader");
    }
    let url = format!("kafka://{}", cluster.bootstrap_servers());
    let t = outbox_testkit::TestSchema::new("kafka_slow_topic").await;
    let relay = std::sync::Arc::new(
        outbox_relay::Relay::new(
            outbox_relay::Store::new(t.pool.clone(), t.schema.clone()),
            KafkaPublisher::from_url(&url).unwrap(),
            outbox_relay::RelayConfig::default(),
        )
        .unwrap(),
    );
    // One message to each topic first, at full speed: the producer and
    // its view of both topics are ready.
    support::enqueue_n(&t, 1, &fast).await;
    support::enqueue_n(&t, 1, &slow).await;
    assert_eq!(relay.run_once().await.unwrap().marked_sent, 2);

    let rtt = Duration::from_secs(3);
    cluster.broker_round_trip_time(2, rtt).expect("rtt");
    support::enqueue_n(&t, 20, &fast).await;
    support::enqueue_n(&t, 5, &slow).await;
    let started = std::time::Instant::now();
    let pass = tokio::spawn({
        let relay = relay.clone();
        async move { relay.run_once().await }
    });
    let sent = |topic: String| {
        let t = &t;
        async move {
            t.count(&format!(
                "SELECT count(*) FROM {{schema}}.all_messages WHERE status = 'sent' AND topic = '{topic}'"
            ))
            .await
        }
    };
    while sent(fast.clone()).await < 21 {
        assert!(
            started.elapsed() < rtt - Duration::from_millis(500),
            "the healthy topic's messages waited for the slow one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        sent(slow.clone()).await,
        1,
        "the slow topic's are in flight"
    );
    let stats = pass.await.unwrap().unwrap();
    assert_eq!((stats.claimed, stats.marked_sent), (25, 25), "{stats:?}");
    assert_eq!(sent(slow).await, 6);
}

/// Per-aggregate order through the relay (batch 500, 4 pipelines) on a
/// topic of 4 partitions, read back with librdkafka's consumer: every
/// message of an aggregate is in one partition (key = aggregate id), in id
/// order. On the mock cluster and on Tansu.
#[tokio::test]
async fn keeps_aggregate_order() {
    keeps_aggregate_order_on(KafkaHarness::new()).await
}

#[tokio::test]
async fn keeps_aggregate_order_on_tansu() {
    keeps_aggregate_order_on(KafkaHarness::tansu()).await
}

async fn keeps_aggregate_order_on(h: KafkaHarness) {
    const PARTITIONS: i32 = 4;
    let topic = h.topic_of("orders", PARTITIONS);
    let p = KafkaPublisher::from_url(&h.url()).unwrap();
    let _t = support::relay_in_aggregate_order("kafka_order", p, &topic).await;

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", h.bootstrap())
        .set("group.id", unique("readback"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut per_partition: Vec<Vec<(String, i64)>> = Vec::new();
    for partition in 0..PARTITIONS {
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, Duration::from_secs(10))
            .expect("watermarks");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, partition, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let want = usize::try_from(high - low).unwrap();
        let mut got = Vec::new();
        // One record per poll: bounded by time, not by a count of polls (a
        // partition may hold more records than any fixed count).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while got.len() < want && std::time::Instant::now() < deadline {
            if let Some(r) = consumer.poll(Duration::from_millis(100)) {
                let (key, _, body) = decode(&r.expect("consume"));
                let (agg, n) = support::agg_and_n(&serde_json::from_str(&body).unwrap());
                assert_eq!(key.as_deref(), Some(agg.as_str()), "key = aggregate id");
                got.push((agg, n));
            }
        }
        assert_eq!(
            got.len(),
            want,
            "read partition {partition} to its high watermark"
        );
        per_partition.push(got);
    }
    let mut home: std::collections::HashMap<String, usize> = Default::default();
    for (p, records) in per_partition.iter().enumerate() {
        for (agg, _) in records {
            let first = *home.entry(agg.clone()).or_insert(p);
            assert_eq!(first, p, "{agg} in partitions {first} and {p}");
        }
        // Within a partition, each aggregate's messages in id order.
        support::assert_aggregate_order_in(records);
    }
    assert!(
        per_partition.iter().filter(|r| !r.is_empty()).count() > 1,
        "the aggregates spread over partitions"
    );
    let all: Vec<(String, i64)> = per_partition.into_iter().flatten().collect();
    support::assert_aggregate_order(&all);
}
