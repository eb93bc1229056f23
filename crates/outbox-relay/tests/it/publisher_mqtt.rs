//! The MQTT publisher against the real Mosquitto (127.0.0.1:1883), read
//! back by paho-mqtt in a second process. Each test has its own topic prefix.

#![cfg(feature = "publisher-mqtt")]

use crate::conformance;
use crate::support;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::mqtt::MqttPublisher;
use outbox_relay::{Envelope, ErrorClass, Publisher};
use outbox_testkit::readback;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{assert_all_ok, by_event_id, messages, suffix};

fn publisher(prefix: &str, options: &str) -> MqttPublisher {
    MqttPublisher::from_url(&format!("mqtt://127.0.0.1:1883?prefix={prefix}{options}")).unwrap()
}

fn prefix() -> String {
    format!("outbox-test/{}", suffix())
}

/// What a subscriber got: `(MQTT topic, body)`, in arrival order.
type Inbound = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Reads back with rumqttc, subscribed to the target's prefix before
/// anything is published (MQTT keeps nothing for absent subscribers).
/// MQTT has no per-message dedupe: consumers drop resends by event_id.
#[derive(Default)]
struct MqttHarness {
    /// Per target prefix, what its subscriber got; the subscribers live as
    /// long as the harness (one test).
    inbound: Mutex<Vec<(String, Inbound, tokio::task::JoinHandle<()>)>>,
}

impl Drop for MqttHarness {
    fn drop(&mut self) {
        for (_, _, task) in self.inbound.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl MqttHarness {
    /// Subscribes to `<prefix>/#` and waits for the SUBACK.
    async fn subscribe(&self, prefix: &str) {
        use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
        let mut opts = MqttOptions::new(format!("reader-{}", suffix()), "127.0.0.1", 1883);
        opts.set_keep_alive(Duration::from_secs(30));
        let (client, mut eventloop) = AsyncClient::new(opts, 64);
        client
            .subscribe(format!("{prefix}/#"), QoS::AtLeastOnce)
            .await
            .unwrap();
        let inbound: Inbound = Arc::default();
        let (subscribed, ready) = tokio::sync::oneshot::channel();
        let sink = inbound.clone();
        let task = tokio::spawn(async move {
            let _client = client;
            let mut subscribed = Some(subscribed);
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(s) = subscribed.take() {
                            let _ = s.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        sink.lock().unwrap().push((p.topic, p.payload.to_vec()));
                    }
                    Ok(_) => {}
                    Err(e) => panic!("MQTT reader: {e}"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .expect("SUBACK from Mosquitto on 127.0.0.1:1883")
            .unwrap();
        self.inbound
            .lock()
            .unwrap()
            .push((prefix.to_owned(), inbound, task));
    }
}

impl Harness for MqttHarness {
    type P = MqttPublisher;
    const DEDUPES: bool = false;

    /// One topic prefix per target, with its own subscriber.
    async fn target(&self) -> Target<MqttPublisher> {
        let prefix = prefix();
        self.subscribe(&prefix).await;
        Target {
            publisher: publisher(&prefix, ""),
            topic: unique("orders.created"),
        }
    }

    /// PUBACK says the broker has the message, not that the subscriber
    /// does: wait until nothing more arrives for a while.
    async fn read_back(&self, t: &Target<MqttPublisher>, topic: &str) -> Vec<Received> {
        let prefix = t.publisher.config().prefix.clone();
        let inbound = self
            .inbound
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _, _)| *p == prefix)
            .map(|(_, i, _)| i.clone())
            .expect("a subscriber for the target");
        let mut seen = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = inbound.lock().unwrap().len();
            if now == seen {
                break;
            }
            seen = now;
        }
        let wanted = t.publisher.config().mqtt_topic(topic);
        let got = inbound.lock().unwrap().clone();
        got.into_iter()
            .filter(|(t, _)| *t == wanted)
            .map(|(_, body)| {
                // No headers in MQTT 3.1.1: the body is the whole envelope.
                let e = Envelope::from_json(std::str::from_utf8(&body).unwrap())
                    .expect("body is the envelope");
                Received {
                    event_id: e.event_id,
                    payload: e.payload.to_value().unwrap(),
                    envelope: Some(e),
                }
            })
            .collect()
    }

    async fn unreachable(&self) -> MqttPublisher {
        MqttPublisher::from_url(&format!(
            "mqtt://127.0.0.1:{}?timeout_ms=5000",
            closed_port()
        ))
        .unwrap()
    }

    /// A wildcard cannot be published to: refused before sending, alone.
    async fn refused_topic(&self, _: &Target<MqttPublisher>) -> (String, Scope) {
        (format!("{}.+.wildcard", unique("bad")), Scope::Topic)
    }
}

conformance_suite!(MqttHarness::default());

#[tokio::test]
async fn delivers_the_whole_envelope_at_qos_1() {
    let prefix = prefix();
    let reader = readback::mqtt(&format!("{prefix}/#"), 3).await;
    let p = publisher(&prefix, "");
    let batch = messages(3, "orders.created");
    assert_all_ok(&p.publish(&batch).await);

    let got = reader.finish().await;
    assert_eq!(got.len(), 3);
    for d in &got {
        let env: Envelope = serde_json::from_value(d["body"].clone()).unwrap();
        let m = by_event_id(&batch, &env.event_id.to_string());
        // Every field, headers and payload included.
        assert_eq!(env, Envelope::from(m));
        assert_eq!(d["topic"], format!("{prefix}/orders/created"));
        assert_eq!(d["qos"], 1);
    }
}

#[tokio::test]
async fn topic_map_none_keeps_dots() {
    let prefix = prefix();
    let reader = readback::mqtt(&format!("{prefix}/#"), 1).await;
    let p = publisher(&prefix, "&topic_map=none");
    assert_all_ok(&p.publish(&messages(1, "orders.created")).await);
    let got = reader.finish().await;
    assert_eq!(got[0]["topic"], format!("{prefix}/orders.created"));
}

#[tokio::test]
async fn acks_map_to_their_messages_beyond_the_packet_id_window() {
    // More messages than packet ids in flight, over two batches on one
    // session: ids wrap and are reused while acks arrive.
    let prefix = prefix();
    let reader = readback::mqtt(&format!("{prefix}/#"), 500).await;
    let p = publisher(&prefix, "&inflight=7");
    let first = messages(250, "bulk");
    let second = messages(250, "bulk");
    assert_all_ok(&p.publish(&first).await);
    assert_all_ok(&p.publish(&second).await);

    let got = reader.finish().await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|d| d["body"]["event_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    let mut want: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|m| m.event_id.to_string())
        .collect();
    want.sort();
    assert_eq!(ids, want);
}

#[tokio::test]
async fn broker_unreachable_is_retryable() {
    let p = MqttPublisher::from_url("mqtt://user:hunter2@127.0.0.1:1?timeout_ms=5000").unwrap();
    let outcomes = p.publish(&messages(2, "t")).await;
    assert_eq!(outcomes.len(), 2);
    for o in outcomes {
        let e = o.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(!e.message.contains("hunter2"), "{e}");
    }
    assert!(p.check().await.unwrap_err().is_retryable());
}

#[tokio::test]
async fn reconnects_on_a_later_batch_after_losing_the_session() {
    let prefix = prefix();
    let client_id = format!("outbox-test-{}", suffix());
    let reader = readback::mqtt(&format!("{prefix}/#"), 2).await;
    let p = publisher(&prefix, &format!("&client_id={client_id}"));
    assert_all_ok(&p.publish(&messages(1, "t")).await);

    // A second client with the same id takes the session over: the broker
    // disconnects the publisher's.
    let (intruder, mut events) =
        rumqttc::AsyncClient::new(rumqttc::MqttOptions::new(&client_id, "127.0.0.1", 1883), 8);
    while !matches!(
        events.poll().await.unwrap(),
        rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))
    ) {}
    intruder.disconnect().await.unwrap();
    while events.poll().await.is_ok() {}

    let batch = messages(1, "t");
    let first = p.publish(&batch).await.remove(0);
    if let Err(e) = &first {
        assert!(e.is_retryable(), "{e}");
        assert_all_ok(&p.publish(&batch).await);
    }
    assert_eq!(reader.finish().await.len(), 2);
}

/// Mosquitto answers a topic it cannot take (a TAB or another control
/// character, more than 65535 bytes) by closing the connection, which
/// carries the whole batch: each such message must be refused before
/// anything is sent, fail alone, and leave the session up for the next one.
#[tokio::test]
async fn bad_topics_and_sizes_fail_alone_and_the_session_survives() {
    let prefix = prefix();
    let long = format!("ok.{}", "l".repeat(70_000));
    let bads: [(&str, &str, usize); 4] = [
        ("ok.with\ttab", "is invalid", 0),
        ("ok.del\u{7f}", "is invalid", 0),
        (&long, "65535", 0),
        ("ok.big", "MQTT max_packet_size is 8192", 9_000),
    ];
    let reader = readback::mqtt(&format!("{prefix}/#"), 20 * bads.len() + 3).await;
    let p = publisher(&prefix, "&max_packet_size=8192");
    let mut want = Vec::new();
    for (topic, reason, size) in bads {
        let mut batch = messages(20, "ok");
        let mut bad = messages(1, topic).remove(0);
        if size > 0 {
            bad.payload = serde_json::json!({ "blob": "x".repeat(size) }).into();
        }
        batch.insert(10, bad);
        let outcomes = p.publish(&batch).await;
        assert_eq!(outcomes.len(), 21);
        let e = outcomes[10].clone().unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent, "{e}");
        assert!(e.message.contains(reason), "{e}");
        for (i, o) in outcomes.iter().enumerate().filter(|(i, _)| *i != 10) {
            assert!(o.is_ok(), "{topic:?}: message {i} failed: {o:?}");
        }
        batch.remove(10);
        want.extend(batch.iter().map(|m| m.event_id.to_string()));
    }
    let next = messages(3, "ok");
    assert_all_ok(&p.publish(&next).await);
    want.extend(next.iter().map(|m| m.event_id.to_string()));

    let mut got: Vec<String> = reader
        .finish()
        .await
        .iter()
        .map(|d| d["body"]["event_id"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every good message, once");
}

/// `$SYS/…` is the broker's own tree and `$share/…` a subscription syntax:
/// neither is a topic to publish to unless the operator says so.
#[tokio::test]
async fn reserved_topics_are_refused_unless_allowed() {
    let p = MqttPublisher::from_url("mqtt://127.0.0.1:1883?topic_map=none").unwrap();
    let mut batch = messages(3, "outbox-test/ok");
    batch[0].topic = "$SYS/broker/x".into();
    batch[2].topic = "$share/g/x".into();
    let outcomes = p.publish(&batch).await;
    for i in [0, 2] {
        let e = outcomes[i].clone().unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent, "{e}");
        assert!(e.message.contains("reserved prefix \"$\""), "{e}");
        assert!(e.message.contains("allow_reserved=true"), "{e}");
    }
    assert!(outcomes[1].is_ok(), "{outcomes:?}");

    let allowed =
        MqttPublisher::from_url("mqtt://127.0.0.1:1883?topic_map=none&allow_reserved=true")
            .unwrap();
    let mut m = messages(1, "x");
    m[0].topic = format!("$outbox-test/{}", suffix());
    assert_all_ok(&allowed.publish(&m).await);
}
