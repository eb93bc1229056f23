//! The NATS JetStream publisher against the machine's nats-server
//! (`NATS_URL`, default `nats://127.0.0.1:4222`, started with `-js`).
#![cfg(feature = "publisher-nats")]

mod conformance;

use async_nats::jetstream::{self, stream};
use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::nats::NatsPublisher;
use outbox_relay::{Envelope, ErrorClass, Publisher};

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
}

impl NatsHarness {
    fn new() -> Self {
        let id = unique("t");
        Self {
            prefix: format!("{id}."),
            stream: id.to_uppercase(),
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

    async fn another_topic(&self, _: &Target<NatsPublisher>) -> String {
        format!("ok.{}", unique("other"))
    }

    async fn read_back(&self, t: &Target<NatsPublisher>, topic: &str) -> Vec<Received> {
        stream_messages(&self.stream, &t.publisher.config().subject(topic))
            .await
            .iter()
            .map(|m| {
                let e = envelope(m);
                Received {
                    event_id: e.event_id,
                    payload: e.payload.clone(),
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
    assert_eq!(body, m.payload, "the body is the payload alone");
}

#[tokio::test]
async fn create_stream_captures_the_prefix() {
    let id = unique("c");
    let name = id.to_uppercase();
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
