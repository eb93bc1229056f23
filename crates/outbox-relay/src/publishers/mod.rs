//! The concrete publishers, one folder each, each behind a Cargo feature.
//! [`AnyPublisher`] is what configuration builds from a `--publisher` URL.
//!
//! Layout: `<name>/mod.rs` is the publisher (what it sends and how it
//! classifies the broker's answers), `<name>/config.rs` its URL options;
//! each keeps only what is specific to its broker. What they share is in
//! `kit/` (the URL and option parser with redaction, the envelope as a
//! record of fields, the lazy connection, batch outcomes) and `limits.rs`
//! (the checks against a destination's limits before sending).

#[cfg(feature = "publisher-amqp")]
pub mod amqp;
#[cfg(feature = "publisher-asynq")]
pub mod asynq;
#[cfg(feature = "publisher-http")]
pub mod http;
#[cfg(feature = "publisher-kafka")]
pub mod kafka;
mod kit;
mod limits;
#[cfg(feature = "publisher-mqtt")]
pub mod mqtt;
#[cfg(feature = "publisher-nats")]
pub mod nats;
#[cfg(feature = "publisher-postgres")]
pub mod postgres;
#[cfg(feature = "publisher-redis")]
pub mod redis;

use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
use deadpool_postgres::Pool;
use outbox::Schema;

/// What a publisher may need from the relay's side when built from a URL.
#[derive(Debug, Clone)]
pub struct PublisherContext {
    /// The outbox database's pool (the `postgres` publisher writes there).
    pub pool: Pool,
    /// The outbox schema.
    pub schema: Schema,
    /// The relay id, recorded by sinks that keep one.
    pub relay_id: String,
}

/// Every publisher this build knows, chosen at run time.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyPublisher {
    /// `postgres` or `postgres://...`: the `published_events` table.
    #[cfg(feature = "publisher-postgres")]
    Postgres(postgres::PostgresPublisher),
    /// `amqp://…`: RabbitMQ with publisher confirms.
    #[cfg(feature = "publisher-amqp")]
    Amqp(amqp::AmqpPublisher),
    /// `mqtt://…`: MQTT 3.1.1, QoS 1.
    #[cfg(feature = "publisher-mqtt")]
    Mqtt(mqtt::MqttPublisher),
    /// `http://…`, `https://…`: signed webhooks.
    #[cfg(feature = "publisher-http")]
    Http(http::HttpPublisher),
    /// `redis://…`: Redis Streams.
    #[cfg(feature = "publisher-redis")]
    Redis(redis::RedisPublisher),
    /// `asynq://…`: asynq tasks on Redis.
    #[cfg(feature = "publisher-asynq")]
    Asynq(asynq::AsynqPublisher),
    /// `nats://…`: NATS JetStream.
    #[cfg(feature = "publisher-nats")]
    Nats(nats::NatsPublisher),
    /// `kafka://…`: Kafka.
    #[cfg(feature = "publisher-kafka")]
    Kafka(kafka::KafkaPublisher),
    /// Never built: keeps the enum (and its matches) well-formed in a build
    /// with no publisher feature at all.
    #[doc(hidden)]
    None(std::convert::Infallible),
}

/// The schemes this build accepts, for the unknown-scheme error.
const KNOWN: &[(&str, bool)] = &[
    ("postgres", cfg!(feature = "publisher-postgres")),
    ("amqp://", cfg!(feature = "publisher-amqp")),
    ("mqtt://", cfg!(feature = "publisher-mqtt")),
    ("http://", cfg!(feature = "publisher-http")),
    ("https://", cfg!(feature = "publisher-http")),
    ("redis://", cfg!(feature = "publisher-redis")),
    ("asynq://", cfg!(feature = "publisher-asynq")),
    ("nats://", cfg!(feature = "publisher-nats")),
    ("kafka://", cfg!(feature = "publisher-kafka")),
];

impl AnyPublisher {
    /// Builds the publisher a `--publisher` value names: `postgres` (the
    /// outbox database) or `postgres://…` / `postgresql://…` (another one),
    /// `amqp://…`, `mqtt://…`, `http(s)://…`, `redis://…`, `asynq://…`,
    /// `nats://…`, `kafka://…`. Nothing connects here: a
    /// broker that is down delays publishing, it does not stop the relay.
    // Only the postgres publisher needs the context.
    #[cfg_attr(not(feature = "publisher-postgres"), allow(unused_variables))]
    pub async fn from_url(url: &str, ctx: &PublisherContext) -> Result<Self> {
        let scheme = url.split_once("://").map_or(url, |(s, _)| s);
        match scheme {
            #[cfg(feature = "publisher-postgres")]
            "postgres" | "postgresql" => Ok(Self::Postgres(
                postgres::PostgresPublisher::from_url(url, ctx).await?,
            )),
            #[cfg(feature = "publisher-amqp")]
            "amqp" | "amqps" => Ok(Self::Amqp(amqp::AmqpPublisher::from_url(url)?)),
            #[cfg(feature = "publisher-mqtt")]
            "mqtt" | "mqtts" => Ok(Self::Mqtt(mqtt::MqttPublisher::from_url(url)?)),
            #[cfg(feature = "publisher-http")]
            "http" | "https" => Ok(Self::Http(http::HttpPublisher::from_env(url)?)),
            #[cfg(feature = "publisher-redis")]
            "redis" => Ok(Self::Redis(redis::RedisPublisher::from_url(url)?)),
            #[cfg(feature = "publisher-asynq")]
            "asynq" => Ok(Self::Asynq(asynq::AsynqPublisher::from_url(url)?)),
            #[cfg(feature = "publisher-nats")]
            "nats" => Ok(Self::Nats(nats::NatsPublisher::from_url(url)?)),
            #[cfg(feature = "publisher-kafka")]
            "kafka" => Ok(Self::Kafka(kafka::KafkaPublisher::from_url(url)?)),
            _ => Err(unknown(url)),
        }
    }

    /// Checks `url` as [`AnyPublisher::from_url`] does (scheme, address,
    /// every option and its value), through the same parsers, without
    /// connecting or touching any database: what `outbox config check`
    /// runs, so it refuses exactly what the relay refuses. The lazy
    /// publishers are built and dropped; Kafka's producer too, as librdkafka
    /// checks its pass-through properties only when it is created.
    pub fn check_url(url: &str) -> Result<()> {
        let scheme = url.split_once("://").map_or(url, |(s, _)| s);
        match scheme {
            #[cfg(feature = "publisher-postgres")]
            "postgres" | "postgresql" => postgres::PostgresPublisher::check_url(url),
            #[cfg(feature = "publisher-amqp")]
            "amqp" | "amqps" => amqp::AmqpPublisher::from_url(url).map(drop),
            #[cfg(feature = "publisher-mqtt")]
            "mqtt" | "mqtts" => mqtt::MqttPublisher::from_url(url).map(drop),
            #[cfg(feature = "publisher-http")]
            "http" | "https" => http::HttpConfig::from_env(url).map(drop),
            #[cfg(feature = "publisher-redis")]
            "redis" => redis::RedisPublisher::from_url(url).map(drop),
            #[cfg(feature = "publisher-asynq")]
            "asynq" => asynq::AsynqPublisher::from_url(url).map(drop),
            #[cfg(feature = "publisher-nats")]
            "nats" => nats::NatsPublisher::from_url(url).map(drop),
            #[cfg(feature = "publisher-kafka")]
            "kafka" => kafka::KafkaPublisher::from_url(url).map(drop),
            _ => Err(unknown(url)),
        }
    }
}

/// The error for a scheme this build does not know, listing those it does.
fn unknown(url: &str) -> Error {
    let known: Vec<&str> = KNOWN
        .iter()
        .filter(|(_, built)| *built)
        .map(|(s, _)| *s)
        .collect();
    Error::Publisher(format!(
        "unknown publisher {:?}: this build accepts {}",
        redact_url(url),
        known.join(", ")
    ))
}

/// `$body` with `$p` bound to the publisher inside `$any`, whichever it is:
/// the one match every `AnyPublisher` method forwards through.
macro_rules! forward {
    ($any:expr, $p:ident => $body:expr) => {
        match $any {
            #[cfg(feature = "publisher-postgres")]
            AnyPublisher::Postgres($p) => $body,
            #[cfg(feature = "publisher-amqp")]
            AnyPublisher::Amqp($p) => $body,
            #[cfg(feature = "publisher-mqtt")]
            AnyPublisher::Mqtt($p) => $body,
            #[cfg(feature = "publisher-http")]
            AnyPublisher::Http($p) => $body,
            #[cfg(feature = "publisher-redis")]
            AnyPublisher::Redis($p) => $body,
            #[cfg(feature = "publisher-asynq")]
            AnyPublisher::Asynq($p) => $body,
            #[cfg(feature = "publisher-nats")]
            AnyPublisher::Nats($p) => $body,
            #[cfg(feature = "publisher-kafka")]
            AnyPublisher::Kafka($p) => $body,
            AnyPublisher::None(never) => match *never {},
        }
    };
}

impl Publisher for AnyPublisher {
    fn name(&self) -> &str {
        forward!(self, p => p.name())
    }

    // A build without any publisher feature has no arm that reads `batch`.
    #[allow(unused_variables)]
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        forward!(self, p => p.publish(batch).await)
    }

    #[allow(unused_variables)]
    async fn publish_reporting(
        &self,
        batch: &[Message],
        accepted: &crate::Accepted,
    ) -> Vec<Outcome> {
        forward!(self, p => p.publish_reporting(batch, accepted).await)
    }

    fn batch_order(&self) -> crate::BatchOrder {
        forward!(self, p => p.batch_order())
    }

    async fn check(&self) -> Result<(), PublishError> {
        forward!(self, p => p.check().await)
    }
}

/// `url` with any password replaced by `***`, for logs and errors: the
/// one redaction function, [`crate::redact::redact`], under the name the
/// publishers have always used.
pub use crate::redact::redact as redact_url;

#[cfg(test)]
mod tests {
    use super::{redact_url, AnyPublisher, PublisherContext};

    fn ctx() -> PublisherContext {
        PublisherContext {
            // Building a pool does not connect.
            pool: crate::pool("postgres://nobody@127.0.0.1:1/none", 1).unwrap(),
            schema: outbox::Schema::new("outbox").unwrap(),
            relay_id: "test".into(),
        }
    }

    /// Each scheme this build accepts picks its publisher; an unknown one
    /// lists them all (and not the URL's password).
    #[tokio::test]
    async fn schemes_choose_the_publisher_and_unknown_ones_list_the_choices() {
        let ctx = ctx();
        let built = |url: &str| {
            let scheme = &url[..url.find("://").unwrap() + 3];
            super::KNOWN.iter().any(|(s, on)| *s == scheme && *on)
        };
        for (url, name) in [
            ("amqp://guest:guest@127.0.0.1:1/%2f", "amqp"),
            ("mqtt://127.0.0.1:1", "mqtt"),
            ("http://127.0.0.1:1/hook", "http"),
            ("https://127.0.0.1:1/hook", "http"),
            ("redis://127.0.0.1:1/0?stream_prefix=app.", "redis"),
            ("asynq://127.0.0.1:1?queue=critical", "asynq"),
            ("nats://127.0.0.1:1?subject_prefix=app.", "nats"),
            ("kafka://127.0.0.1:1,127.0.0.1:2", "kafka"),
        ] {
            if built(url) {
                let p = AnyPublisher::from_url(url, &ctx).await.unwrap();
                assert_eq!(crate::Publisher::name(&p), name);
            }
        }
        let e = AnyPublisher::from_url("kafkaa://u:pw@h", &ctx)
            .await
            .unwrap_err()
            .to_string();
        for (scheme, built) in super::KNOWN {
            assert_eq!(e.contains(scheme), *built, "{scheme}: {e}");
        }
        assert!(!e.contains(":pw@"), "{e}");
    }

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_url("postgres"), "postgres");
        assert!(!redact_url("amqp://u:p%40ss@h/").contains("p%40ss"));
    }
}
