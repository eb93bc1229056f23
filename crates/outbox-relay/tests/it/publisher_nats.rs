//! The NATS JetStream publisher against the machine's nats-server
//! (`NATS_URL`, default `nats://127.0.0.1:4222`, started with `-js`).
#![cfg(feature = "publisher-nats")]

use crate::conformance;
use crate::support;

use async_nats::jetstream::{self, stream};
use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::nats::NatsPublisher;
use outbox_relay::{Envelope, ErrorClass, Publisher};
use outbox_testkit::litter::Litter;

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

async fn js() -> jetstream::Context {
    let client = async_nats::connect(nats_url())
        .await
        .expect("nats-server on NATS_URL (scripts/services.sh starts it)");
    jetstream::new(client)
}

/// Every message `stream` holds on `subject`, oldest first.
pub async fn stream_messages(
    stream: &str,
    subject: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let mut s = js().await.get_stream(stream).await.expect("stream exists");
    let state = s.info().await.unwrap().state.clone();
    let mut out = Vec::new();
    for seq in state.first_sequence..=state.last_sequence {
        if let Ok(m) = s.get_raw_message(seq).await {
            if m.subject.as_str() == subject {
                out.push(m);
            }
        }
    }
    out
}

/// The envelope a consumer rebuilds from the headers and the body.
pub fn envelope(m: &jetstream::message::StreamMessage) -> Envelope {
    let body = std::str::from_utf8(&m.payload).unwrap();
    let headers: Vec<(&str, &str)> = m
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_ref(), v.first()?.as_str())))
        .chain([("payload", body)])
        .collect();
    Envelope::from_fields(headers).expect("headers and body decode")
}

/// A stream per target capturing `<prefix>ok.>` only, so `<prefix>nostream.…`
/// has no stream.
struct NatsHarness {
    prefix: String,
    stream: String,
    /// Its stream, removed with it.
    _litter: Litter,
}

impl NatsHarness {
    fn new() -> Self {
        let id = unique("t");
        let litter = Litter::default();
        litter.nats_stream(&id.to_uppercase());
        Self {
            prefix: format!("{id}."),
            stream: id.to_uppercase(),
            _litter: litter,
        }
    }
}

impl Harness for NatsHarness {
    type P = NatsPublisher;
    const DEDUPES: bool = true;

    async fn target(&self) -> Target<NatsPublisher> {
        js().await
            .create_stream(stream::Config {
                name: self.stream.clone(),
                subjects: vec![format!("{}ok.>", self.prefix)],
                storage: stream::StorageType::Memory,
                ..Default::default()
            })
            .await
            .expect("create test stream");
        let url = format!("{}?subject_prefix={}", nats_url(), self.prefix);
        Target {
            publisher: NatsPublisher::from_url(&url).unwrap(),
            topic: format!("ok.{}", unique("orders")),
        }
    }

    async fn read_back(&self, t: &Target<NatsPublisher>, topic: &str) -> Vec<Received> {
        stream_messages(&self.stream, &t.publisher.config().subject(topic))
            .await
            .iter()
            .map(|m| {
                let e = envelope(m);
                Received {
                    event_id: e.event_id,
                    payload: e.payload.to_value().unwrap(),
                    envelope: Some(e),
                }
            })
            .collect()
    }

    async fn unreachable(&self) -> NatsPublisher {
        let url = format!("nats://127.0.0.1:{}?connect_timeout=2s", closed_port());
        NatsPublisher::from_url(&url).unwrap()
    }

    async fn refused_topic(&self, _: &Target<NatsPublisher>) -> (String, Scope) {
        (format!("nostream.{}", unique("x")), Scope::Topic)
    }
}

conformance_suite!(NatsHarness::new());

#[tokio::test]
async fn no_stream_is_permanent_and_names_the_subject() {
    let h = NatsHarness::new();
    let t = h.target().await;
    let (topic, _) = h.refused_topic(&t).await;
    let out = t
        .publisher
        .publish(&[conformance::message(&topic, 1)])
        .await;
    let e = out[0].as_ref().unwrap_err();
    assert_eq!(e.class, ErrorClass::Permanent);
    assert!(e.message.contains(&format!("{}{topic}", h.prefix)), "{e}");
}

#[tokio::test]
async fn headers_carry_msg_id_and_cloudevents() {
    let h = NatsHarness::new();
    let t = h.target().await;
    let m = conformance::message(&t.topic, 1);
    assert!(t.publisher.publish(std::slice::from_ref(&m)).await[0].is_ok());
    let got = stream_messages(&h.stream, &format!("{}{}", h.prefix, t.topic)).await;
    let hdr = |k: &str| got[0].headers.get(k).map(|v| v.as_str().to_owned());
    let id = m.event_id.to_string();
    let msg_id = got[0].headers.get(async_nats::header::NATS_MESSAGE_ID);
    assert_eq!(msg_id.map(|v| v.as_str()), Some(id.as_str()));
    assert_eq!(hdr("ce-id").as_deref(), Some(id.as_str()));
    assert_eq!(hdr("ce-specversion").as_deref(), Some("1.0"));
    assert_eq!(hdr("ce-type").as_deref(), Some("order.created"));
    assert_eq!(hdr("ce-subject").as_deref(), Some(m.aggregate_id.as_str()));
    assert_eq!(
        hdr("ce-traceparent").as_deref(),
        Some(m.headers["traceparent"].as_str())
    );
    assert_eq!(hdr("content-type").as_deref(), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&got[0].payload).unwrap();
    assert_eq!(
        body,
        m.payload.to_value().unwrap(),
        "the body is the payload alone"
    );
}

#[tokio::test]
async fn create_stream_captures_the_prefix() {
    let id = unique("c");
    let name = id.to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&name);
    let url = format!("{}?subject_prefix={id}.&create_stream={name}", nats_url());
    let p = NatsPublisher::from_url(&url).unwrap();
    let batch: Vec<_> = (0..3)
        .map(|n| conformance::message("orders.eu", n))
        .collect();
    assert!(p.publish(&batch).await.iter().all(Result::is_ok));
    let got = stream_messages(&name, &format!("{id}.orders.eu")).await;
    let ids: Vec<_> = got.iter().map(|m| envelope(m).event_id).collect();
    assert_eq!(ids, batch.iter().map(|m| m.event_id).collect::<Vec<_>>());
    js().await.delete_stream(&name).await.unwrap();
}

/// A payload the client accepts (it checks the body alone against 1 MiB)
/// but whose headers take the whole message past the server's max_payload:
/// sent, the server would close the connection under the whole batch.
#[tokio::test]
async fn message_over_max_payload_fails_alone() {
    let h = NatsHarness::new();
    let t = h.target().await;
    let mut big = conformance::message(&t.topic, 99);
    let blob = "x".repeat(1_048_568 - r#"{"blob":""}"#.len());
    big.payload = serde_json::json!({ "blob": blob }).into();
    assert_eq!(big.payload.to_string().len(), 1_048_568);
    conformance::bad_message_fails_alone(&h, &t, big, "NATS server max_payload is 1048576").await;
}

/// Subjects that are no subject at all (a space or a tab splits the
/// protocol line) fail alone too.
#[tokio::test]
async fn invalid_subject_fails_alone() {
    let h = NatsHarness::new();
    let t = h.target().await;
    let bad = conformance::message(&format!("{}\tx", t.topic), 1);
    conformance::bad_message_fails_alone(&h, &t, bad, "is invalid").await;
}

/// With no subject prefix, a topic naming the JetStream API would be a
/// request to it: `$JS.API.STREAM.DELETE.<name>` deleted the stream.
#[tokio::test]
async fn reserved_subjects_are_refused_and_the_stream_survives() {
    let name = unique("victim").to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&name);
    js().await
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    let p = NatsPublisher::from_url(&nats_url()).unwrap();
    for (topic, prefix) in [
        (format!("$JS.API.STREAM.DELETE.{name}"), "\"$\""),
        ("$SYS.REQ.SERVER.PING".to_owned(), "\"$\""),
        ("_INBOX.abc".to_owned(), "\"_INBOX.\""),
    ] {
        // An empty request, as the API takes it: sent, it would be obeyed.
        let mut m = conformance::message(&topic, 1);
        m.payload = serde_json::json!({}).into();
        let out = p.publish(&[m]).await;
        let e = out[0].as_ref().expect_err("refused");
        assert_eq!(e.class, ErrorClass::Permanent, "{e}");
        assert!(
            e.message.contains(&format!("reserved prefix {prefix}")),
            "{e}"
        );
    }
    assert!(
        js().await.get_stream(&name).await.is_ok(),
        "stream survives"
    );
    js().await.delete_stream(&name).await.unwrap();
}

/// Through the relay, the refused message ends dead with the reason, the
/// stream is still there; with allow_reserved=true the operator can still
/// reach the API on purpose.
#[tokio::test]
async fn relay_dead_letters_a_reserved_subject() {
    let name = unique("victim").to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&name);
    js().await
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    let t = outbox_testkit::TestSchema::new("nats_reserved").await;
    let m = outbox::NewMessage::new("x", "a", "1", &serde_json::json!({}))
        .unwrap()
        .topic(format!("$JS.API.STREAM.DELETE.{name}"));
    let client = t.pool.get().await.unwrap();
    outbox::Outbox::with_schema(t.schema.clone())
        .enqueue_many(&**client, std::slice::from_ref(&m))
        .await
        .unwrap();
    let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
    let p = NatsPublisher::from_url(&nats_url()).unwrap();
    let relay = outbox_relay::Relay::new(store, p, Default::default()).unwrap();
    let pass = relay.run_once().await.unwrap();
    assert_eq!((pass.claimed, pass.dead), (1, 1), "{pass}");
    let dead = t
        .count(
            "SELECT count(*) FROM {schema}.all_messages \
             WHERE status = 'dead' AND dead_reason LIKE '%reserved prefix \"$\"%'",
        )
        .await;
    assert_eq!(dead, 1, "dead, with the reason");
    assert!(
        js().await.get_stream(&name).await.is_ok(),
        "stream survives"
    );

    let allowed = NatsPublisher::from_url(&format!("{}?allow_reserved=true", nats_url())).unwrap();
    let mut delete = conformance::message(&format!("$JS.API.STREAM.DELETE.{name}"), 2);
    // The API takes an empty request.
    delete.payload = serde_json::json!({}).into();
    // Not a stream subject: the API answers the request, there is no PubAck,
    // so the outcome is an error; what matters is that it was sent.
    let _ = allowed.publish(&[delete]).await;
    assert!(
        js().await.get_stream(&name).await.is_err(),
        "opt-in reaches the API"
    );
}

/// The report's case through the relay: 100 rows, one of them 1,048,568
/// bytes of payload. The big one ends dead with the limit named, the 99
/// others sent, and the stream holds each of them exactly once.
#[tokio::test]
async fn relay_sends_99_and_dead_letters_the_one_over_max_payload() {
    let id = unique("big");
    let name = id.to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&name);
    let url = format!("{}?subject_prefix={id}.&create_stream={name}", nats_url());
    let t = outbox_testkit::TestSchema::new("nats_big").await;
    let blob = "x".repeat(1_048_568 - r#"{"blob":""}"#.len());
    let messages: Vec<outbox::NewMessage> = (0..100)
        .map(|n| {
            let payload = if n == 50 {
                serde_json::json!({ "blob": blob })
            } else {
                serde_json::json!({ "n": n })
            };
            outbox::NewMessage::new("order.created", "order", n.to_string(), &payload)
                .unwrap()
                .topic("orders")
        })
        .collect();
    let client = t.pool.get().await.unwrap();
    outbox::Outbox::with_schema(t.schema.clone())
        .enqueue_many(&**client, &messages)
        .await
        .unwrap();
    let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
    let p = NatsPublisher::from_url(&url).unwrap();
    let relay = outbox_relay::Relay::new(store, p, Default::default()).unwrap();
    let pass = relay.run_once().await.unwrap();
    assert_eq!(
        // `failed` counts the dead one too.
        (pass.claimed, pass.marked_sent, pass.failed, pass.dead),
        (100, 99, 1, 1),
        "{pass}"
    );
    let dead = t
        .count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead' \
             AND dead_reason LIKE '%NATS server max_payload is 1048576%'",
        )
        .await;
    assert_eq!(dead, 1);
    assert_eq!(
        stream_messages(&name, &format!("{id}.orders")).await.len(),
        99
    );
    js().await.delete_stream(&name).await.unwrap();
}

/// Per-aggregate order through the relay (batch 500, 4 pipelines): nats-py
/// reads the stream back, and each aggregate's messages come in id order.
#[tokio::test]
async fn keeps_aggregate_order() {
    let id = unique("order");
    let name = id.to_uppercase();
    let litter = Litter::default();
    litter.nats_stream(&name);
    let url = format!("{}?subject_prefix={id}.&create_stream={name}", nats_url());
    let p = NatsPublisher::from_url(&url).unwrap();
    let _t = support::relay_in_aggregate_order("nats_order", p, "orders").await;
    let got: Vec<(String, i64)> = outbox_testkit::readback::nats_stream(&nats_url(), &name)
        .await
        .iter()
        .map(|m| {
            assert_eq!(m["subject"], format!("{id}.orders"));
            let data = m["data"].as_str().expect("data");
            support::agg_and_n(&serde_json::from_str(data).unwrap())
        })
        .collect();
    // Nats-Msg-Id dedupes a resend: exactly one each.
    assert_eq!(got.len(), support::AGGREGATES * support::PER_AGGREGATE);
    support::assert_aggregate_order(&got);
    js().await.delete_stream(&name).await.unwrap();
}
