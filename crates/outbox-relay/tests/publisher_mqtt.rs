//! The MQTT publisher against the real Mosquitto (127.0.0.1:1883), read
//! back by paho-mqtt in a second process. Each test has its own topic prefix.

#![cfg(feature = "publisher-mqtt")]

mod support;

use outbox::{Delivery, Inbox};
use outbox_relay::publishers::mqtt::MqttPublisher;
use outbox_relay::{Envelope, ErrorClass, Publisher};
use outbox_testkit::{readback, TestSchema};
use support::{assert_all_ok, by_event_id, messages, suffix};

fn publisher(prefix: &str, options: &str) -> MqttPublisher {
    MqttPublisher::from_url(&format!("mqtt://127.0.0.1:1883?prefix={prefix}{options}")).unwrap()
}

fn prefix() -> String {
    format!("outbox-test/{}", suffix())
}

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
async fn an_invalid_topic_fails_alone_and_permanently() {
    let prefix = prefix();
    let reader = readback::mqtt(&format!("{prefix}/#"), 2).await;
    let p = publisher(&prefix, "");
    let mut batch = messages(3, "ok");
    batch[1].topic = "bad.+.wildcard".into();
    let outcomes = p.publish(&batch).await;
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let e = outcomes[1].clone().unwrap_err();
    assert_eq!(e.class, ErrorClass::Permanent, "{e}");
    assert_eq!(reader.finish().await.len(), 2);
}

#[tokio::test]
async fn event_id_is_a_dedupe_key_across_redelivery() {
    let prefix = prefix();
    let reader = readback::mqtt(&format!("{prefix}/#"), 2).await;
    let p = publisher(&prefix, "");
    let batch = messages(1, "orders");
    assert_all_ok(&p.publish(&batch).await);
    assert_all_ok(&p.publish(&batch).await);
    let got = reader.finish().await;

    let schema = TestSchema::new("mqtt_dedupe").await;
    let inbox = Inbox::with_schema(&schema.schema);
    let client = schema.pool.get().await.unwrap();
    let mut seen = Vec::new();
    for d in &got {
        let env: Envelope = serde_json::from_value(d["body"].clone()).unwrap();
        let id = env.event_id.to_string();
        seen.push(inbox.record(&**client, &id, &env.topic).await.unwrap());
    }
    assert_eq!(seen, [Delivery::First, Delivery::Duplicate]);
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
            bad.payload = serde_json::json!({ "blob": "x".repeat(size) });
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
