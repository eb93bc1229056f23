//! The Redis Streams publisher against the machine's Redis (`REDIS_URL`,
//! default `redis://127.0.0.1:6379`).
#![cfg(feature = "publisher-redis")]

use crate::conformance;
use crate::support;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::redis::RedisPublisher;
use outbox_relay::{Envelope, Publisher};
use outbox_testkit::litter::Litter;
use redis::AsyncCommands;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

async fn client() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis on REDIS_URL (scripts/services.sh starts it)")
}

/// Every entry of `stream`, as field/value pairs.
pub async fn entries(stream: &str) -> Vec<(String, Vec<(String, String)>)> {
    let reply: redis::streams::StreamRangeReply = client().await.xrange_all(stream).await.unwrap();
    reply
        .ids
        .into_iter()
        .map(|id| {
            let fields = id
                .map
                .iter()
                .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap()))
                .collect();
            (id.id, fields)
        })
        .collect()
}

struct RedisHarness {
    prefix: String,
    /// Every key under the prefix, removed with the harness.
    _litter: Litter,
}

impl RedisHarness {
    fn new() -> Self {
        let prefix = format!("{}:", unique("outbox_test"));
        let litter = Litter::default();
        litter.redis_keys(&redis_url(), &format!("{prefix}*"));
        Self {
            prefix,
            _litter: litter,
        }
    }
}

impl Harness for RedisHarness {
    type P = RedisPublisher;
    const DEDUPES: bool = false;

    async fn target(&self) -> Target<RedisPublisher> {
        let url = format!("{}?stream_prefix={}", redis_url(), self.prefix);
        Target {
            publisher: RedisPublisher::from_url(&url).unwrap(),
            topic: unique("orders"),
        }
    }

    async fn read_back(&self, _: &Target<RedisPublisher>, topic: &str) -> Vec<Received> {
        entries(&format!("{}{topic}", self.prefix))
            .await
            .into_iter()
            .map(|(_, fields)| {
                let e = Envelope::from_fields(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .expect("entry decodes");
                Received {
                    event_id: e.event_id,
                    payload: e.payload.to_value().unwrap(),
                    envelope: Some(e),
                }
            })
            .collect()
    }

    async fn unreachable(&self) -> RedisPublisher {
        RedisPublisher::from_url(&format!("redis://127.0.0.1:{}", closed_port())).unwrap()
    }

    async fn refused_topic(&self, _: &Target<RedisPublisher>) -> (String, Scope) {
        // A key of another type: XADD gets WRONGTYPE.
        let topic = unique("not_a_stream");
        let _: () = client()
            .await
            .set(format!("{}{topic}", self.prefix), "x")
            .await
            .unwrap();
        (topic, Scope::Topic)
    }
}

conformance_suite!(RedisHarness::new());

#[tokio::test]
async fn maxlen_trims_the_stream_approximately() {
    let prefix = format!("{}:", unique("outbox_trim"));
    let litter = Litter::default();
    litter.redis_keys(&redis_url(), &format!("{prefix}*"));
    let url = format!("{}?stream_prefix={prefix}&maxlen=10", redis_url());
    let p = RedisPublisher::from_url(&url).unwrap();
    let batch: Vec<_> = (0..500).map(|n| conformance::message("t", n)).collect();
    assert!(p.publish(&batch).await.iter().all(Result::is_ok));
    let len: usize = client().await.xlen(format!("{prefix}t")).await.unwrap();
    assert!(
        len < batch.len(),
        "MAXLEN ~ trimmed the stream ({len} entries)"
    );
}

#[tokio::test]
async fn wrongtype_is_permanent_and_names_the_reply() {
    let h = RedisHarness::new();
    let t = h.target().await;
    let (topic, _) = h.refused_topic(&t).await;
    let out = t
        .publisher
        .publish(&[conformance::message(&topic, 1)])
        .await;
    let e = out[0].as_ref().unwrap_err();
    assert!(e.message.contains("WRONGTYPE"), "{e}");
}

/// A message over max_message_size fails alone; so does, with no stream
/// prefix, a topic naming a key of the asynq layout (`asynq:…`) that
/// shares the server. The others are on the stream and the connection
/// carries the next batch.
#[tokio::test]
async fn bad_messages_fail_alone() {
    let h = RedisHarness::new();
    let url = format!(
        "{}?stream_prefix={}&max_message_size=20000",
        redis_url(),
        h.prefix
    );
    let topic = unique("orders");
    let t = Target {
        publisher: RedisPublisher::from_url(&url).unwrap(),
        topic: topic.clone(),
    };
    let mut big = conformance::message(&topic, 99);
    big.payload = serde_json::json!({ "blob": "x".repeat(30_000) }).into();
    conformance::bad_message_fails_alone(&h, &t, big, "max_message_size is 20000").await;

    let bare = RedisPublisher::from_url(&redis_url()).unwrap();
    let out = bare
        .publish(&[conformance::message("asynq:{default}:pending", 1)])
        .await;
    let e = out[0].as_ref().unwrap_err();
    assert_eq!(e.class, outbox_relay::ErrorClass::Permanent, "{e}");
    assert!(e.message.contains("reserved prefix \"asynq:\""), "{e}");
}

/// Per-aggregate order through the relay (batch 500, 4 pipelines): redis-py
/// reads the stream back, and each aggregate's messages come in id order.
#[tokio::test]
async fn keeps_aggregate_order() {
    let prefix = format!("{}:", unique("outbox_order"));
    let litter = Litter::default();
    litter.redis_keys(&redis_url(), &format!("{prefix}*"));
    let p = RedisPublisher::from_url(&format!("{}?stream_prefix={prefix}", redis_url())).unwrap();
    let _t = support::relay_in_aggregate_order("redis_order", p, "orders").await;
    let stream = format!("{prefix}orders");
    let got: Vec<(String, i64)> = outbox_testkit::readback::redis_stream(&redis_url(), &stream)
        .await
        .iter()
        .map(|e| {
            let payload = e["fields"]["payload"].as_str().expect("payload field");
            support::agg_and_n(&serde_json::from_str(payload).unwrap())
        })
        .collect();
    assert_eq!(got.len(), support::AGGREGATES * support::PER_AGGREGATE);
    support::assert_aggregate_order(&got);
    let _: () = client().await.del(&stream).await.unwrap();
}
