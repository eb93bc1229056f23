//! The conformance suite every publisher passes (River's
//! `riverdrivertest.Exercise`, Vector's sink compliance): delivery with every
//! envelope field intact, event_id as the dedupe key, and error classes.
//!
//! A broker's test file implements [`Harness`] and expands
//! [`conformance_suite!`]; each check is then one `#[tokio::test]` of that
//! file, on a fresh destination, so they run in parallel.

use chrono::{SubsecRound, Utc};
use outbox_relay::{Envelope, ErrorClass, Message, Outcome, Publisher};
use serde_json::json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// What a broker handed back for one published message.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The event id the consumer sees.
    pub event_id: Uuid,
    /// The whole envelope as the consumer rebuilds it. Every publisher
    /// carries it, so [`delivers_every_field`] requires it; checks that only
    /// count deliveries may leave it out.
    pub envelope: Option<Envelope>,
    /// The payload as delivered.
    pub payload: serde_json::Value,
}

/// Where messages for a refused topic fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only that topic's messages fail; the rest of the batch goes through.
    Topic,
    /// The broker refuses the whole destination (one asynq queue): every
    /// message of the batch fails.
    Destination,
}

/// A publisher on a fresh destination, and the topic prepared for it.
pub struct Target<P> {
    pub publisher: P,
    pub topic: String,
}

/// What a broker's test file provides.
#[allow(async_fn_in_trait)]
pub trait Harness {
    type P: Publisher;

    /// Whether the broker itself drops a second copy with the same event id
    /// (NATS `Nats-Msg-Id`, asynq task ids); otherwise consumers do, by
    /// event id.
    const DEDUPES: bool;

    /// A publisher for a fresh destination and topic.
    async fn target(&self) -> Target<Self::P>;

    /// Everything the broker holds for `topic`, oldest first.
    async fn read_back(&self, target: &Target<Self::P>, topic: &str) -> Vec<Received>;

    /// A publisher whose broker address refuses connections.
    async fn unreachable(&self) -> Self::P;

    /// A topic the broker will refuse for `target`, and how far the refusal reaches.
    async fn refused_topic(&self, target: &Target<Self::P>) -> (String, Scope);
}

/// A message as the relay hands it over, with every field set to something
/// a careless transport would mangle.
pub fn message(topic: &str, n: i64) -> Message {
    let headers: BTreeMap<String, String> = [
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("X-Tenant", "acme"),
        ("note", "café ✓"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Message {
        id: rand::random::<u32>() as i64 * 1000 + n,
        event_id: Uuid::now_v7(),
        event_type: "order.created".into(),
        event_version: 3,
        aggregate_type: "order".into(),
        aggregate_id: format!("order-{n}"),
        topic: topic.to_owned(),
        payload: json!({"n": n, "total": 19.99, "lines": [{"sku": "A-1", "qty": 2}], "memo": "naïve \"quoted\"\nline"}).into(),
        headers,
        attempts: 1,
        // PostgreSQL keeps microseconds; so does every transport here.
        created_at: Utc::now().trunc_subsecs(6),
    }
}

fn assert_ok(outcomes: &[Outcome], n: usize, what: &str) {
    assert_eq!(outcomes.len(), n, "{what}: one outcome per message");
    for (i, o) in outcomes.iter().enumerate() {
        assert!(o.is_ok(), "{what}: message {i} failed: {o:?}");
    }
}

/// Each message arrives once with every envelope field intact.
pub async fn delivers_every_field<H: Harness>(h: &H) {
    let t = h.target().await;
    let batch: Vec<Message> = (0..3).map(|n| message(&t.topic, n)).collect();
    assert_ok(&t.publisher.publish(&batch).await, 3, "publish");
    let got = h.read_back(&t, &t.topic).await;
    assert_eq!(got.len(), batch.len(), "one delivery per message: {got:?}");
    for m in &batch {
        let r = got
            .iter()
            .find(|r| r.event_id == m.event_id)
            .unwrap_or_else(|| panic!("event {} not delivered", m.event_id));
        assert_eq!(r.payload, m.payload.to_value().unwrap());
        let e = r
            .envelope
            .as_ref()
            .unwrap_or_else(|| panic!("event {}: no envelope read back", m.event_id));
        assert_eq!(e, &Envelope::from(m), "every envelope field intact");
    }
    let check = t.publisher.check().await;
    assert!(check.is_ok(), "check on a live broker: {check:?}");
}

/// A resend (what a crash between publish and mark causes) either is
/// dropped by the broker or arrives with the same event_id, for the inbox.
pub async fn event_id_is_the_dedupe_key<H: Harness>(h: &H) {
    let t = h.target().await;
    let m = message(&t.topic, 7);
    assert_ok(
        &t.publisher.publish(std::slice::from_ref(&m)).await,
        1,
        "first send",
    );
    assert_ok(
        &t.publisher.publish(std::slice::from_ref(&m)).await,
        1,
        "resend",
    );
    let got = h.read_back(&t, &t.topic).await;
    assert_eq!(got.len(), if H::DEDUPES { 1 } else { 2 }, "{got:?}");
    assert!(got.iter().all(|r| r.event_id == m.event_id), "{got:?}");
}

/// A broker that cannot be reached fails every message, retryable.
pub async fn unreachable_is_retryable<H: Harness>(h: &H) {
    let p = h.unreachable().await;
    let batch: Vec<Message> = (0..2).map(|n| message("unreachable", n)).collect();
    let outcomes = p.publish(&batch).await;
    assert_eq!(outcomes.len(), 2);
    for o in &outcomes {
        let e = o.as_ref().expect_err("nothing can be delivered");
        assert_eq!(e.class, ErrorClass::Retryable, "{e}");
    }
    let e = p.check().await.expect_err("check fails");
    assert_eq!(e.class, ErrorClass::Retryable, "{e}");
}

/// A message the broker refuses fails permanently.
pub async fn refusal_is_permanent<H: Harness>(h: &H) {
    let t = h.target().await;
    let (topic, _) = h.refused_topic(&t).await;
    let outcomes = t.publisher.publish(&[message(&topic, 1)]).await;
    let e = outcomes[0].as_ref().expect_err("refused");
    assert_eq!(e.class, ErrorClass::Permanent, "{e}");
}

/// In a batch, a refused message fails alone where the broker allows it.
pub async fn outcomes_are_per_message<H: Harness>(h: &H) {
    let t = h.target().await;
    let (refused, scope) = h.refused_topic(&t).await;
    let batch = vec![
        message(&t.topic, 1),
        message(&refused, 2),
        message(&t.topic, 3),
    ];
    let outcomes = t.publisher.publish(&batch).await;
    assert_eq!(outcomes.len(), 3, "one outcome per message");
    let bad = outcomes[1].as_ref().expect_err("the refused one fails");
    assert_eq!(bad.class, ErrorClass::Permanent, "{bad}");
    match scope {
        Scope::Topic => {
            assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
            let got = h.read_back(&t, &t.topic).await;
            let ids: Vec<Uuid> = got.iter().map(|r| r.event_id).collect();
            assert_eq!(ids.len(), 2, "{got:?}");
            assert!(ids.contains(&batch[0].event_id) && ids.contains(&batch[2].event_id));
        }
        Scope::Destination => {
            assert!(outcomes
                .iter()
                .all(|o| o.as_ref().is_err_and(|e| !e.is_retryable())));
        }
    }
}

/// A batch of 20 good messages with `bad` in the middle: exactly `bad`
/// fails, permanently, with a reason holding `reason`; the 20 others are
/// delivered (counted on the broker), and the same publisher delivers the
/// next batch, so the bad message did not take the connection down.
pub async fn bad_message_fails_alone<H: Harness>(
    h: &H,
    t: &Target<H::P>,
    bad: Message,
    reason: &str,
) {
    let mut batch: Vec<Message> = (0..20).map(|n| message(&t.topic, n)).collect();
    batch.insert(10, bad);
    let outcomes = t.publisher.publish(&batch).await;
    assert_eq!(outcomes.len(), 21, "one outcome per message");
    let e = outcomes[10].as_ref().expect_err("the bad message fails");
    assert_eq!(e.class, ErrorClass::Permanent, "{e}");
    assert!(e.message.contains(reason), "reason names the limit: {e}");
    for (i, o) in outcomes.iter().enumerate().filter(|(i, _)| *i != 10) {
        assert!(o.is_ok(), "message {i} failed with the bad one: {o:?}");
    }
    let got = h.read_back(t, &t.topic).await;
    assert_eq!(got.len(), 20, "every good message delivered once");
    let next: Vec<Message> = (20..23).map(|n| message(&t.topic, n)).collect();
    assert_ok(&t.publisher.publish(&next).await, 3, "the next batch");
    assert_eq!(h.read_back(t, &t.topic).await.len(), 23);
}

/// Through the relay: with the broker down, a pass hands its claims back
/// without spending an attempt and opens the breaker (the publisher's
/// `check` must fail), so an outage never pushes messages toward dead.
pub async fn outage_spends_no_attempts<H: Harness>(h: &H) {
    let t = outbox_testkit::TestSchema::new("conformance_outage").await;
    let messages: Vec<outbox::NewMessage> = (0..3)
        .map(|n| {
            outbox::NewMessage::new("order.created", "order", n.to_string(), &json!({"n": n}))
                .unwrap()
        })
        .collect();
    let client = t.pool.get().await.unwrap();
    outbox::Outbox::with_schema(t.schema.clone())
        .enqueue_many(&**client, &messages)
        .await
        .unwrap();
    let store = outbox_relay::Store::new(t.pool.clone(), t.schema.clone());
    let relay = outbox_relay::Relay::new(store, h.unreachable().await, Default::default()).unwrap();
    let pass = relay.run_once().await.unwrap();
    assert_eq!(
        (pass.claimed, pass.released, pass.failed, pass.dead),
        (3, 3, 0, 0),
        "{pass}"
    );
    assert!(relay.breaker_open());
    let untouched = t
        .count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND attempts = 0",
        )
        .await;
    assert_eq!(untouched, 3);
}

/// Expands to one `#[tokio::test]` per check, each building its own harness
/// with `$harness` (an expression, evaluated inside an async test).
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        #[tokio::test]
        async fn conformance_delivers_every_field() {
            conformance::delivers_every_field(&$harness).await
        }
        #[tokio::test]
        async fn conformance_event_id_is_the_dedupe_key() {
            conformance::event_id_is_the_dedupe_key(&$harness).await
        }
        #[tokio::test]
        async fn conformance_unreachable_is_retryable() {
            conformance::unreachable_is_retryable(&$harness).await
        }
        #[tokio::test]
        async fn conformance_refusal_is_permanent() {
            conformance::refusal_is_permanent(&$harness).await
        }
        #[tokio::test]
        async fn conformance_outcomes_are_per_message() {
            conformance::outcomes_are_per_message(&$harness).await
        }
        #[tokio::test]
        async fn conformance_outage_spends_no_attempts() {
            conformance::outage_spends_no_attempts(&$harness).await
        }
    };
}

/// A name no other test uses.
pub fn unique(label: &str) -> String {
    format!("{label}_{:08x}", rand::random::<u32>())
}

/// An address on this machine where nothing listens.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
