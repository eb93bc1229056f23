//! The webhook publisher against a real local HTTP server (see
//! `outbox_testkit::webhook`), signatures checked by an independent
//! implementation (Python's `standardwebhooks` and `hmac`).

#![cfg(feature = "publisher-http")]

use crate::conformance;
use crate::support;

use base64::Engine as _;
use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox::{NewMessage, Outbox};
use outbox_relay::publishers::http::{setting, HttpConfig, HttpPublisher, WebhookSecret};
use outbox_relay::publishers::PublisherSettings;
use outbox_relay::{Envelope, ErrorClass, Publisher, Relay, RelayConfig, Store};
use outbox_testkit::webhook::{Receiver, Rule};
use outbox_testkit::{readback, TestSchema};
use std::time::Duration;
use support::{assert_all_ok, by_event_id, messages};

fn random_whsec() -> String {
    let key: [u8; 24] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

fn publisher(url: &str, given: &[(&str, &str)]) -> HttpPublisher {
    let settings = given
        .iter()
        .fold(PublisherSettings::new(), |s, (k, v)| s.with(k, *v));
    HttpPublisher::new(HttpConfig::with_settings(url, &settings).unwrap()).unwrap()
}

/// Reads back what one local receiver got, by the CloudEvent's `topic`.
/// Every request is answered before `publish` returns, so no wait. Webhooks
/// have no per-message dedupe: receivers drop resends by `webhook-id`.
struct HttpHarness {
    rx: Receiver,
}

impl HttpHarness {
    async fn new() -> Self {
        Self {
            rx: Receiver::start().await,
        }
    }
}

/// The envelope out of a structured CloudEvent: the inverse of
/// `Envelope::to_cloudevent`, attribute by attribute; any member whose name
/// the envelope does not own is one of the message's headers, and the rest
/// of those travel in `outboxheaders`.
fn envelope(ce: &serde_json::Value) -> Envelope {
    let ce = ce.as_object().expect("a CloudEvent is an object");
    let text = |k: &str| ce[k].as_str().unwrap_or_else(|| panic!("{k}")).to_owned();
    let mut headers: std::collections::BTreeMap<String, String> = ce
        .get("outboxheaders")
        .map(|h| serde_json::from_str(h.as_str().unwrap()).unwrap())
        .unwrap_or_default();
    // A producer's header never has a name the envelope owns: those are
    // refused at enqueue.
    let own = |k: &String| !outbox::RESERVED_HEADERS.contains(&k.as_str());
    for (k, v) in ce.iter().filter(|(k, _)| own(k)) {
        headers.insert(k.clone(), v.as_str().unwrap().to_owned());
    }
    let (headers, payload) = (
        serde_json::to_string(&headers).unwrap(),
        ce["data"].to_string(),
    );
    let (id, outboxid, kind, version, aggregate) = (
        text("id"),
        text("outboxid"),
        text("type"),
        text("eventversion"),
        text("aggregatetype"),
    );
    let (subject, topic, time) = (text("subject"), text("topic"), text("time"));
    Envelope::from_fields([
        ("event_id", id.as_str()),
        ("message_id", &outboxid),
        ("event_type", &kind),
        ("event_version", &version),
        ("aggregate_type", &aggregate),
        ("aggregate_id", &subject),
        ("topic", &topic),
        ("created_at", &time),
        ("headers", &headers),
        ("payload", &payload),
    ])
    .expect("the CloudEvent makes an envelope")
}

impl Harness for HttpHarness {
    type P = HttpPublisher;
    const DEDUPES: bool = false;

    async fn target(&self) -> Target<HttpPublisher> {
        Target {
            publisher: publisher(&self.rx.url, &[]),
            topic: unique("orders.created"),
        }
    }

    async fn read_back(&self, _: &Target<HttpPublisher>, topic: &str) -> Vec<Received> {
        self.rx
            .received()
            .iter()
            .map(|r| {
                assert_eq!(r.content_type, "application/cloudevents+json");
                let e = envelope(&r.json());
                assert_eq!(r.id, e.event_id.to_string(), "webhook-id is event_id");
                e
            })
            .filter(|e| e.topic == topic)
            .map(|e| Received {
                event_id: e.event_id,
                payload: e.payload.to_value().unwrap(),
                envelope: Some(e),
            })
            .collect()
    }

    async fn unreachable(&self) -> HttpPublisher {
        publisher(&format!("http://127.0.0.1:{}/hook", closed_port()), &[])
    }

    /// The receiver answers 422 for that topic: a 4xx other than 408/429.
    async fn refused_topic(&self, _: &Target<HttpPublisher>) -> (String, Scope) {
        let topic = unique("refused");
        self.rx.respond_to_topic(&topic, Rule::status(422));
        (topic, Scope::Topic)
    }
}

conformance_suite!(HttpHarness::new().await);

#[tokio::test]
async fn delivers_a_signed_cloudevent_that_an_independent_library_verifies() {
    let rx = Receiver::start().await;
    let secret = random_whsec();
    let p = publisher(&rx.url, &[(setting::SECRET, &secret)]);
    let batch = messages(5, "orders.created");
    assert_all_ok(&p.publish(&batch).await);

    let got = rx.wait_for(5).await;
    assert_eq!(got.len(), 5);
    let ours = WebhookSecret::parse(&secret).unwrap();
    for r in &got {
        let m = by_event_id(&batch, &r.id);
        assert_eq!(r.content_type, "application/cloudevents+json");
        // The endpoint's own query reaches it untouched.
        assert_eq!(r.path_and_query, "/hooks/outbox?tenant=acme");
        // Every field: the structured CloudEvent carries the whole envelope.
        let sent: serde_json::Value =
            serde_json::from_str(&Envelope::from(m).to_cloudevent("/outbox")).unwrap();
        assert_eq!(r.json(), sent);
        let ts: i64 = r.timestamp.parse().unwrap();
        let sig = r.signature.as_deref().unwrap();
        assert!(ours.verify(&r.id, ts, r.body.as_bytes(), sig));
    }
    assert_eq!(readback::verify_webhooks(&secret, &rx.as_json()).await, 5);
}

#[tokio::test]
async fn a_plain_secret_signs_with_its_bytes() {
    let rx = Receiver::start().await;
    let secret = "correct horse battery staple";
    let p = publisher(&rx.url, &[(setting::SECRET, secret)]);
    assert_all_ok(&p.publish(&messages(3, "t")).await);
    rx.wait_for(3).await;
    assert_eq!(readback::verify_webhooks(secret, &rx.as_json()).await, 3);
}

/// Nothing a producer writes reaches the request line or the HTTP headers:
/// header names and values with CR/LF, NUL or other invisible bytes, and a
/// topic shaped like a path or a query, travel inside the JSON body. So no
/// message of the batch can break the request of another, and none needs
/// refusing: all 21 arrive, at the configured URL, with their headers intact.
#[tokio::test]
async fn hostile_headers_and_topics_stay_in_the_body() {
    let rx = Receiver::start().await;
    let p = publisher(&rx.url, &[]);
    let mut batch = messages(21, "orders");
    let bad = &mut batch[10];
    bad.topic = "../admin?x=1#frag".into();
    bad.headers.insert(
        "x-evil\r\nInjected".into(),
        "a\r\nX-Other: 1\u{0}\u{7f}".into(),
    );
    bad.headers.insert("traceparent".into(), "\n".into());
    assert_all_ok(&p.publish(&batch).await);
    let got = rx.wait_for(21).await;
    assert_eq!(got.len(), 21);
    for r in &got {
        assert_eq!(r.path_and_query, "/hooks/outbox?tenant=acme");
        let m = by_event_id(&batch, &r.id);
        let sent: serde_json::Value =
            serde_json::from_str(&Envelope::from(m).to_cloudevent("/outbox")).unwrap();
        assert_eq!(r.json(), sent);
    }
}

#[tokio::test]
async fn each_message_gets_its_own_outcome() {
    let rx = Receiver::start().await;
    let p = publisher(&rx.url, &[(setting::CONCURRENCY, "2")]);
    let batch = messages(6, "t");
    rx.respond(batch[1].event_id.to_string(), Rule::status(422));
    rx.respond(batch[2].event_id.to_string(), Rule::status(500));
    rx.respond(batch[3].event_id.to_string(), Rule::status(400));
    rx.respond(batch[4].event_id.to_string(), Rule::status(408));
    let outcomes = p.publish(&batch).await;
    let classes: Vec<Option<ErrorClass>> = outcomes
        .iter()
        .map(|o| o.as_ref().err().map(|e| e.class))
        .collect();
    assert_eq!(
        classes,
        [
            None,
            Some(ErrorClass::Permanent),
            Some(ErrorClass::Retryable),
            Some(ErrorClass::Permanent),
            Some(ErrorClass::Retryable),
            None
        ]
    );
    let e = outcomes[1].clone().unwrap_err();
    assert!(e.message.contains("422"), "{e}");
}

#[tokio::test]
async fn retry_after_is_passed_on_in_seconds_or_as_a_date() {
    let rx = Receiver::start().await;
    let p = publisher(&rx.url, &[]);
    let batch = messages(2, "t");
    rx.respond(batch[0].event_id.to_string(), Rule::retry_after(429, "7"));
    let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
    rx.respond(batch[1].event_id.to_string(), Rule::retry_after(503, later));
    let outcomes = p.publish(&batch).await;
    let e0 = outcomes[0].clone().unwrap_err();
    assert!(e0.is_retryable());
    assert_eq!(e0.retry_after, Some(Duration::from_secs(7)));
    let e1 = outcomes[1].clone().unwrap_err();
    assert!(e1.is_retryable());
    let d = e1.retry_after.expect("a date is honoured too");
    assert!(d > Duration::ZERO && d <= Duration::from_secs(120), "{d:?}");
}

#[tokio::test]
async fn the_relay_schedules_the_next_attempt_after_retry_after() {
    let schema = TestSchema::new("http_retry_after").await;
    let client = schema.pool.get().await.unwrap();
    let msg = NewMessage::new("order.created", "order", "1", &serde_json::json!({"n": 1})).unwrap();
    Outbox::with_schema(schema.schema.clone())
        .enqueue(&**client, &msg)
        .await
        .unwrap();
    let config = RelayConfig::default();
    // Honoured up to the policy's longest step (tests/it/relay.rs shows the
    // cap): ask for half of it, far longer than the first step.
    let asked = config.retry.longest_delay() / 2;
    assert!(asked > config.retry.delay(1) * 10);
    let rx = Receiver::start().await;
    rx.respond_all(Rule::retry_after(429, asked.as_secs().to_string()));
    let relay = Relay::new(
        Store::new(schema.pool.clone(), schema.schema.clone()),
        publisher(&rx.url, &[]),
        config,
    )
    .unwrap();
    let stats = relay.run_once().await.unwrap();
    assert_eq!((stats.claimed, stats.failed, stats.dead), (1, 1, 0));
    // A tenth of the wait is left for the test's own run time.
    let waiting = schema
        .count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE status = 'failed' \
             AND next_run_at > now() + interval '{} seconds'",
            asked.as_secs() * 9 / 10
        ))
        .await;
    assert_eq!(waiting, 1);
}

#[tokio::test]
async fn timeouts_and_unreachable_endpoints_are_retryable() {
    let rx = Receiver::start().await;
    rx.respond_all(Rule::hang());
    let p = publisher(&rx.url, &[(setting::TIMEOUT, "300ms")]);
    let e = p.publish(&messages(1, "t")).await.remove(0).unwrap_err();
    assert!(e.is_retryable() && e.message.contains("timed out"), "{e}");

    let p = publisher("http://user:hunter2@127.0.0.1:1/hook", &[]);
    let e = p.publish(&messages(1, "t")).await.remove(0).unwrap_err();
    assert!(e.is_retryable() && e.message.contains("unreachable"), "{e}");
    assert!(!e.message.contains("hunter2"), "{e}");
    assert!(p.check().await.unwrap_err().is_retryable());
}

#[tokio::test]
async fn the_secret_never_shows() {
    let rx = Receiver::start().await;
    rx.respond_all(Rule::status(401));
    let secret = "s3cr3t-do-not-print";
    let p = publisher(&rx.url, &[(setting::SECRET, secret)]);
    let e = p.publish(&messages(1, "t")).await.remove(0).unwrap_err();
    assert_eq!(e.class, ErrorClass::Permanent);
    for text in [e.to_string(), format!("{e:?}"), format!("{p:?}")] {
        assert!(!text.contains(secret), "{text}");
    }
}

/// Webhooks go out in parallel, so with ordering on the relay sends an
/// aggregate's messages one at a time (waves): with every answer delayed
/// 50 ms so requests overlap, the receiver never has two requests of one
/// aggregate in flight, and each aggregate's requests arrive in id order.
#[tokio::test]
async fn concurrent_publisher_sends_one_request_per_aggregate_at_a_time() {
    let rx = Receiver::start().await;
    rx.respond_all(Rule::delayed(200, Duration::from_millis(50)));
    let started = std::time::Instant::now();
    let _t =
        support::relay_in_aggregate_order("http_order", publisher(&rx.url, &[]), "orders").await;
    let n = support::AGGREGATES * support::PER_AGGREGATE;
    // One aggregate's 40 requests one after the other: at least 40 x 50 ms.
    assert!(started.elapsed() >= Duration::from_millis(40 * 50));
    let got: Vec<(String, i64)> = rx
        .received()
        .iter()
        .map(|r| support::agg_and_n(&r.json()["data"]))
        .collect();
    assert_eq!(got.len(), n, "one request per message");
    support::assert_aggregate_order(&got);
    let in_flight = rx.max_in_flight_per_aggregate();
    assert_eq!(in_flight.len(), support::AGGREGATES);
    for (agg, max) in in_flight {
        assert_eq!(max, 1, "{agg:?} had {max} requests in flight at once");
    }

    // The control: handed a batch of one aggregate directly, the publisher
    // itself sends in parallel, and the receiver sees it.
    let rx = Receiver::start().await;
    rx.respond_all(Rule::delayed(200, Duration::from_millis(50)));
    let mut batch = messages(5, "orders");
    batch
        .iter_mut()
        .for_each(|m| m.aggregate_id = "same".into());
    assert_all_ok(&publisher(&rx.url, &[]).publish(&batch).await);
    let max = rx.max_in_flight_per_aggregate()[&("order".to_owned(), "same".to_owned())];
    assert!(max > 1, "the receiver counts overlapping requests ({max})");
}

/// A bad endpoint is refused with an error a caller can match
/// (`ErrorKind::Publisher`) that keeps the URL parser's error as its source.
#[test]
fn a_bad_endpoint_is_a_publisher_error_keeping_its_cause() {
    let e = outbox_relay::publishers::AnyPublisher::check_url("http://[::1/hook").unwrap_err();
    assert_eq!(e.kind(), outbox_relay::ErrorKind::Publisher);
    let cause = std::error::Error::source(&e).expect("the URL parser's error is the source");
    let chain = outbox_relay::error_chain(&e);
    assert!(chain.ends_with(&format!(": {cause}")), "{chain}");
    assert!(!e.to_string().contains(&cause.to_string()), "{e}");
}
