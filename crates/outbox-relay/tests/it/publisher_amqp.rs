//! The RabbitMQ publisher against the real broker (127.0.0.1:5672,
//! guest/guest), read back by pika in a second process. Each test has its
//! own exchange.

#![cfg(feature = "publisher-amqp")]

use crate::conformance;
use crate::support;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox_relay::publishers::amqp::{AmqpConfig, AmqpPublisher};
use outbox_relay::{Envelope, ErrorClass, Publisher};
use outbox_testkit::readback;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use support::{assert_all_ok, by_event_id, messages, suffix};

const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

fn publisher(exchange: &str, declare: bool) -> AmqpPublisher {
    AmqpPublisher::from_url(&format!("{BROKER}?exchange={exchange}&declare={declare}")).unwrap()
}

/// Deletes an exchange a test declared without a reader (readers delete theirs).
async fn delete_exchange(exchange: &str) {
    use lapin::{options::ExchangeDeleteOptions, Connection, ConnectionProperties};
    let conn = Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_delete(exchange, ExchangeDeleteOptions::default())
        .await
        .unwrap();
    let _ = conn.close(200, "").await;
}

/// Reads back with lapin: per topic, a queue bound before anything is
/// published (an exchange keeps nothing for queues bound later), drained
/// with basic.get. A confirmed publish is already in its queues, so no wait.
/// RabbitMQ has no per-message dedupe: consumers drop resends by event_id.
struct AmqpHarness {
    // Held: the exclusive queues live as long as this connection.
    _connection: Connection,
    channel: Channel,
    /// What each topic's queue gave so far (basic.get takes it off).
    got: Mutex<HashMap<String, Vec<Received>>>,
}

impl AmqpHarness {
    async fn new() -> Self {
        let connection = Connection::connect(BROKER, ConnectionProperties::default())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672");
        let channel = connection.create_channel().await.unwrap();
        Self {
            _connection: connection,
            channel,
            got: Mutex::default(),
        }
    }

    /// A queue receiving `topic` from `exchange`, named after both.
    async fn bind(&self, exchange: &str, topic: &str) {
        let queue = format!("{exchange}.{topic}");
        let exclusive = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        self.channel
            .queue_declare(&queue, exclusive, FieldTable::default())
            .await
            .unwrap();
        self.channel
            .queue_bind(
                &queue,
                exchange,
                topic,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
}

/// The envelope out of an AMQP delivery: the metadata headers, the body as
/// the payload, and the message's own headers (the table less the metadata
/// and the CloudEvents `ce-*` attributes: every name the envelope owns).
fn envelope(headers: &FieldTable, body: &[u8]) -> Envelope {
    let text: BTreeMap<String, String> = headers
        .inner()
        .iter()
        .map(|(k, v)| match v {
            AMQPValue::LongString(s) => (k.to_string(), s.to_string()),
            other => panic!("header {k} is not a long string: {other:?}"),
        })
        .collect();
    let own: BTreeMap<&str, &str> = text
        .iter()
        // A producer's header never has a name the envelope owns: those
        // are refused at enqueue.
        .filter(|(k, _)| {
            !outbox::RESERVED_HEADERS.contains(&k.as_str())
                && !outbox::RESERVED_HEADER_PREFIXES
                    .iter()
                    .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let own = serde_json::to_string(&own).unwrap();
    let payload = std::str::from_utf8(body).unwrap();
    Envelope::from_fields(
        text.iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain([("headers", own.as_str()), ("payload", payload)]),
    )
    .expect("the metadata headers make an envelope")
}

impl Harness for AmqpHarness {
    type P = AmqpPublisher;
    const DEDUPES: bool = false;

    /// One exchange per target, deleted with its last queue.
    async fn target(&self) -> Target<AmqpPublisher> {
        let exchange = unique("outbox_t");
        let opts = ExchangeDeclareOptions {
            auto_delete: true,
            ..ExchangeDeclareOptions::default()
        };
        self.channel
            .exchange_declare(&exchange, ExchangeKind::Topic, opts, FieldTable::default())
            .await
            .unwrap();
        let topic = unique("orders.created");
        self.bind(&exchange, &topic).await;
        Target {
            publisher: publisher(&exchange, false),
            topic,
        }
    }

    async fn read_back(&self, t: &Target<AmqpPublisher>, topic: &str) -> Vec<Received> {
        let queue = format!("{}.{topic}", t.publisher.config().exchange);
        let mut fresh = Vec::new();
        while let Some(m) = self
            .channel
            .basic_get(&queue, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let headers = m.delivery.properties.headers().clone().unwrap_or_default();
            let e = envelope(&headers, &m.delivery.data);
            let id = m.delivery.properties.message_id().as_ref().unwrap();
            assert_eq!(
                id.as_str(),
                e.event_id.to_string(),
                "message_id is event_id"
            );
            fresh.push(Received {
                event_id: e.event_id,
                payload: e.payload.to_value().unwrap(),
                envelope: Some(e),
            });
        }
        let mut got = self.got.lock().unwrap();
        let all = got.entry(topic.to_owned()).or_default();
        all.extend(fresh);
        all.clone()
    }

    async fn unreachable(&self) -> AmqpPublisher {
        AmqpPublisher::from_url(&format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f",
            closed_port()
        ))
        .unwrap()
    }

    /// No queue is bound for it: the mandatory publish comes back.
    async fn refused_topic(&self, _: &Target<AmqpPublisher>) -> (String, Scope) {
        (unique("nowhere"), Scope::Topic)
    }
}

conformance_suite!(AmqpHarness::new().await);

#[tokio::test]
async fn delivers_every_field_intact() {
    let exchange = format!("outbox_t_{}", suffix());
    let topic = format!("orders.created.{}", suffix());
    let reader = readback::amqp(&exchange, "#", 3).await;
    let p = publisher(&exchange, true);
    let batch = messages(3, &topic);
    assert_all_ok(&p.publish(&batch).await);

    let got = reader.finish().await;
    assert_eq!(got.len(), 3);
    for d in &got {
        let props = &d["properties"];
        let m = by_event_id(&batch, props["message_id"].as_str().unwrap());
        assert_eq!(d["exchange"], exchange.as_str());
        assert_eq!(d["routing_key"], topic.as_str());
        assert_eq!(d["body"], m.payload.to_value().unwrap());
        assert_eq!(props["type"], "order.created");
        assert_eq!(props["timestamp"], m.created_at.timestamp());
        assert_eq!(props["content_type"], "application/json");
        assert_eq!(props["delivery_mode"], 2);
        let h = &props["headers"];
        // Envelope metadata, every field.
        assert_eq!(h["event_id"], m.event_id.to_string());
        assert_eq!(h["message_id"], m.id.to_string());
        assert_eq!(h["event_type"], "order.created");
        assert_eq!(h["event_version"], "3");
        assert_eq!(h["aggregate_type"], "order");
        assert_eq!(h["aggregate_id"], m.aggregate_id.as_str());
        assert_eq!(h["topic"], topic.as_str());
        assert_eq!(h["created_at"], m.created_at.to_rfc3339());
        // The message's own headers, as they are.
        assert_eq!(h["traceparent"], m.headers["traceparent"].as_str());
        assert_eq!(h["X-Tenant"], "acme");
        // CloudEvents binary mode.
        assert_eq!(h["ce-specversion"], "1.0");
        assert_eq!(h["ce-id"], m.event_id.to_string());
        assert_eq!(h["ce-type"], "order.created");
        assert_eq!(h["ce-source"], "/outbox");
        assert_eq!(h["ce-subject"], m.aggregate_id.as_str());
        assert_eq!(h["ce-traceparent"], m.headers["traceparent"].as_str());
    }
}

/// The `message_id` of every delivery read back, sorted.
fn message_ids(got: &[serde_json::Value]) -> Vec<String> {
    let mut ids: Vec<String> = got
        .iter()
        .map(|d| d["properties"]["message_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn unroutable_messages_are_permanent_and_the_rest_of_the_batch_goes_through() {
    let exchange = format!("outbox_t_{}", suffix());
    let routed = format!("routed.{}", suffix());
    let unroutable = format!("nowhere.{}", suffix());
    let reader = readback::amqp(&exchange, "routed.*", 2).await;
    let p = publisher(&exchange, false);
    let mut batch = messages(3, &routed);
    batch[1].topic = unroutable.clone();

    let outcomes = p.publish(&batch).await;
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let e = outcomes[1].clone().unwrap_err();
    assert_eq!(e.class, ErrorClass::Permanent);
    assert!(e.message.contains("unroutable"), "{e}");
    assert!(
        e.message.contains(&exchange) && e.message.contains(&unroutable),
        "{e}"
    );

    let mut want = vec![batch[0].event_id.to_string(), batch[2].event_id.to_string()];
    want.sort();
    assert_eq!(message_ids(&reader.finish().await), want);
}

/// RabbitMQ may confirm a run of publishes with one multiple ack, and lapin
/// resolves those tags in no set order, handing each the next return it
/// holds: a batch with many unroutable messages among routed ones is where a
/// return lands on the wrong message. Each outcome must still be the
/// message's own.
#[tokio::test]
async fn in_a_large_mixed_batch_each_unroutable_message_and_only_it_fails() {
    let exchange = format!("outbox_t_{}", suffix());
    let routed = format!("routed.{}", suffix());
    let unroutable = format!("nowhere.{}", suffix());
    let rounds = 5;
    let size = 120;
    let want_routed = rounds * (size - size / 3);
    let reader = readback::amqp(&exchange, "routed.*", want_routed).await;
    let p = publisher(&exchange, false);
    let mut sent = Vec::new();
    for _ in 0..rounds {
        let mut batch = messages(size, &routed);
        for m in batch.iter_mut().skip(1).step_by(3) {
            m.topic = unroutable.clone();
        }
        let outcomes = p.publish(&batch).await;
        for (m, o) in batch.iter().zip(&outcomes) {
            if m.topic == unroutable {
                let e = o.as_ref().expect_err("an unroutable message fails");
                assert_eq!(e.class, ErrorClass::Permanent, "{e}");
            } else {
                assert!(o.is_ok(), "a routed message succeeds: {o:?}");
                sent.push(m.event_id.to_string());
            }
        }
    }
    sent.sort();
    assert_eq!(message_ids(&reader.finish().await), sent);
}

#[tokio::test]
async fn broker_unreachable_is_retryable() {
    // Port 1: nothing listens there.
    let p = AmqpPublisher::from_url("amqp://guest:guest@127.0.0.1:1/%2f").unwrap();
    let outcomes = p.publish(&messages(2, "t")).await;
    assert_eq!(outcomes.len(), 2);
    for o in outcomes {
        let e = o.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(!e.message.contains("guest:guest"), "{e}");
    }
    assert!(p.check().await.unwrap_err().is_retryable());
}

#[tokio::test]
async fn a_missing_exchange_is_retryable_and_publishing_resumes_once_it_exists() {
    let exchange = format!("outbox_t_{}", suffix());
    let topic = format!("t.{}", suffix());
    let p = publisher(&exchange, false);
    let batch = messages(2, &topic);
    for o in p.publish(&batch).await {
        let e = o.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(
            e.message.contains(&exchange) && e.message.contains("declare=true"),
            "{e}"
        );
    }
    // The reader declares the exchange: the same publisher reconnects.
    let reader = readback::amqp(&exchange, "#", 2).await;
    assert_all_ok(&p.publish(&batch).await);
    assert_eq!(reader.finish().await.len(), 2);
}

#[tokio::test]
async fn declare_creates_a_durable_topic_exchange() {
    let exchange = format!("outbox_t_{}", suffix());
    let p = publisher(&exchange, true);
    p.check().await.unwrap();
    // A passive declare succeeds only if the exchange now exists.
    let passive = AmqpPublisher::new(AmqpConfig {
        declare: false,
        ..p.config().clone()
    });
    passive.check().await.unwrap();
    delete_exchange(&exchange).await;
}

/// Closes, on the broker's side, the connection named `name`.
async fn broker_closes_connection(name: &str) {
    // The plain listing: `close_connection` wants the pid as printed there.
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "client_properties", "-q"])
        .output()
        .await
        .expect("run rabbitmqctl");
    let listing = String::from_utf8_lossy(&out.stdout);
    let needle = format!("{{\"connection_name\",\"{name}\"}}");
    let pid = listing
        .lines()
        .find(|l| l.contains(&needle))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no connection named {name} in:\n{listing}"))
        .to_owned();
    let status = tokio::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "test closes the connection"])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn reconnects_on_a_later_batch_after_the_broker_closes_the_connection() {
    let exchange = format!("outbox_t_{}", suffix());
    let name = format!("outbox-test-{}", suffix());
    let topic = format!("t.{}", suffix());
    let reader = readback::amqp(&exchange, "#", 2).await;
    let p = AmqpPublisher::from_url(&format!(
        "{BROKER}?exchange={exchange}&connection_name={name}"
    ))
    .unwrap();
    assert_all_ok(&p.publish(&messages(1, &topic)).await);

    broker_closes_connection(&name).await;
    // The loss may be seen before the next batch (reconnect at once) or by
    // it (that batch fails retryable); the batch after that goes through.
    let batch = messages(1, &topic);
    let first = p.publish(&batch).await.remove(0);
    if let Err(e) = &first {
        assert!(e.is_retryable(), "{e}");
        assert_all_ok(&p.publish(&batch).await);
    }
    assert_eq!(reader.finish().await.len(), 2);
}

/// A header block larger than a frame, a header name or routing key over
/// 255 bytes, a body over the broker's max_message_size: each fails alone,
/// before anything is sent (RabbitMQ closes the channel or the connection
/// over the first and the last, under the whole batch), and the channel
/// carries the next batch.
#[tokio::test]
async fn oversized_messages_fail_alone_and_the_channel_survives() {
    let exchange = format!("outbox_t_{}", suffix());
    let topic = format!("ok.{}", suffix());
    let mut big_header = messages(1, &topic).remove(0);
    big_header.headers.insert("big".into(), "h".repeat(200_000));
    let mut long_key = messages(1, &topic).remove(0);
    long_key.headers.insert("k".repeat(300), "v".into());
    let long_topic = messages(1, &"t".repeat(300)).remove(0);
    let mut big_body = messages(1, &topic).remove(0);
    big_body.payload = serde_json::json!({ "blob": "b".repeat(70_000) }).into();
    let bads = [
        (big_header, "AMQP frame_max is 131072"),
        (long_key, "at most 255"),
        (long_topic, "at most 255"),
        (big_body, "RabbitMQ max_message_size is 65536"),
    ];
    let reader = readback::amqp(&exchange, "#", 20 * bads.len() + 3).await;
    let p = AmqpPublisher::from_url(&format!(
        "{BROKER}?exchange={exchange}&max_message_size=65536"
    ))
    .unwrap();
    let mut want = Vec::new();
    for (bad, reason) in bads {
        let mut batch = messages(20, &topic);
        batch.insert(10, bad);
        let outcomes = p.publish(&batch).await;
        assert_eq!(outcomes.len(), 21);
        let e = outcomes[10].clone().unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent, "{e}");
        assert!(e.message.contains(reason), "{reason}: {e}");
        for (i, o) in outcomes.iter().enumerate().filter(|(i, _)| *i != 10) {
            assert!(o.is_ok(), "{reason}: message {i} failed: {o:?}");
        }
        batch.remove(10);
        want.extend(batch.iter().map(|m| m.event_id.to_string()));
    }
    let next = messages(3, &topic);
    assert_all_ok(&p.publish(&next).await);
    want.extend(next.iter().map(|m| m.event_id.to_string()));
    let mut got: Vec<String> = reader
        .finish()
        .await
        .iter()
        .map(|d| d["properties"]["message_id"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every good message, once");
}

/// Through the default exchange the topic names a queue; `amq.` queues are
/// the broker's (server-named queues, `amq.rabbitmq.reply-to`).
#[tokio::test]
async fn amq_queues_are_reserved_on_the_default_exchange() {
    let p = AmqpPublisher::from_url(&format!("{BROKER}?exchange=")).unwrap();
    let out = p
        .publish(&messages(1, "amq.rabbitmq.reply-to"))
        .await
        .remove(0);
    let e = out.unwrap_err();
    assert_eq!(e.class, ErrorClass::Permanent, "{e}");
    assert!(e.message.contains("reserved prefix \"amq.\""), "{e}");
    assert!(e.message.contains("allow_reserved=true"), "{e}");
    for (url, needle) in [
        (format!("{BROKER}?exchange=bad%20name"), "exchange"),
        (format!("{BROKER}?exchange=amq.mine&declare=true"), "amq."),
    ] {
        let e = AmqpPublisher::from_url(&url).unwrap_err().to_string();
        assert!(e.contains(needle), "{url}: {e}");
    }
}

/// Per-aggregate order through the relay (batch 500, 4 pipelines): pika
/// reads the queue, and each aggregate's messages come in id order.
#[tokio::test]
async fn keeps_aggregate_order() {
    let exchange = format!("outbox_t_{}", suffix());
    let n = support::AGGREGATES * support::PER_AGGREGATE;
    let reader = readback::amqp(&exchange, "#", n).await;
    let _t =
        support::relay_in_aggregate_order("amqp_order", publisher(&exchange, true), "orders").await;
    let got: Vec<(String, i64)> = reader
        .finish()
        .await
        .iter()
        .map(|d| support::agg_and_n(&d["body"]))
        .collect();
    assert_eq!(got.len(), n);
    support::assert_aggregate_order(&got);
}
