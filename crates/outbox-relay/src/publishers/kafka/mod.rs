//! `kafka://`: an idempotent producer (`enable.idempotence=true`,
//! `acks=all`), so the broker drops the producer's own resends. Each message
//! goes to the topic named by its topic, keyed by `aggregate_id` (one
//! entity's events stay in one partition, in order), with the payload's
//! JSON as the value and, as headers, the envelope's metadata under its field
//! names (`event_id`, …, `headers` as a JSON object) plus the CloudEvents
//! Kafka binding's `ce_*` attributes. The whole batch is handed to
//! librdkafka, then every delivery report awaited.
//!
//! A topic the batch names for the first time is looked up in the
//! broker's metadata first (`topics.rs`): one that does not exist, on a
//! broker that does not create topics when asked, is dead at once with a
//! reason naming it, instead of holding its batch until librdkafka's
//! message timeout and failing as a generic retryable timeout.

mod config;
mod topics;

pub use config::KafkaConfig;

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::publishers::kit::record::Record;
use crate::publishers::limits;
use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
use futures_util::future::join_all;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::sync::Mutex;
use std::time::Duration;

/// The most a record adds to its key, value and headers (librdkafka's
/// `RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`), which it counts against
/// message.max.bytes.
const RECORD_OVERHEAD: usize = 36;

/// The longest topic name Kafka takes.
const MAX_TOPIC: usize = 249;

/// The topics messages go to.
const TOPICS: limits::Destination = limits::Destination {
    publisher: "kafka",
    what: "topic",
    reserved: &config::RESERVED,
    role: "the cluster's internal topics, such as __consumer_offsets",
};

/// The Kafka publisher.
pub struct KafkaPublisher {
    config: KafkaConfig,
    producer: Mutex<FutureProducer>,
    /// What the broker's metadata said of the topics seen lately.
    topics: topics::TopicCache,
}

crate::debug::debug_showing!(KafkaPublisher { config, .. });

impl KafkaPublisher {
    /// A publisher for `config`. librdkafka connects in the background, so
    /// this succeeds while the brokers are down.
    pub fn new(config: KafkaConfig) -> Result<Self> {
        let producer = producer(&config)?;
        Ok(Self {
            config,
            producer: Mutex::new(producer),
            topics: topics::TopicCache::default(),
        })
    }

    /// Parses `url` (see [`KafkaConfig::from_url`]) and builds the publisher.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::new(KafkaConfig::from_url(url)?)
    }

    /// The options in force.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    fn current(&self) -> FutureProducer {
        self.producer.lock().expect("producer lock").clone()
    }

    /// The headers of `m`.
    pub fn headers(&self, m: &Message) -> OwnedHeaders {
        self.headers_sized(m).0
    }

    /// The headers of `m`, and their size as librdkafka counts it.
    fn headers_sized(&self, m: &Message) -> (OwnedHeaders, usize) {
        let record = Record::new(m);
        let mut pairs = record.fields;
        pairs.extend(
            record
                .envelope
                .binary_headers(&self.config.source)
                .into_iter()
                .map(|(k, v)| {
                    // The Kafka binding of CloudEvents spells the prefix `ce_`.
                    match k.strip_prefix("ce-") {
                        Some(attr) => (format!("ce_{attr}"), v),
                        None => (k, v),
                    }
                }),
        );
        // Each header: name and value, each behind a varint length (at most 5 bytes).
        let size = pairs.iter().map(|(k, v)| k.len() + v.len() + 10).sum();
        let headers = pairs.into_iter().fold(OwnedHeaders::new(), |h, (k, v)| {
            h.insert(Header {
                key: &k,
                value: Some(v.as_bytes()),
            })
        });
        (headers, size)
    }

    /// Whether `topic` is one to produce to: librdkafka takes any name and
    /// the message then waits out message_timeout as retryable, where no
    /// retry can help; the internal topics are the cluster's own state.
    fn check_topic(&self, topic: &str) -> Result<(), PublishError> {
        let why = if topic.is_empty() || topic == "." || topic == ".." {
            Some("a topic needs a name other than . or ..")
        } else if topic.len() > MAX_TOPIC {
            Some("longer than 249 bytes, the most Kafka allows")
        } else if !topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            Some("Kafka topic names hold only ASCII letters, digits, '.', '_' and '-'")
        } else {
            None
        };
        TOPICS.check(topic, why, self.config.allow_reserved)
    }
}

fn producer(config: &KafkaConfig) -> Result<FutureProducer> {
    config
        .client_config()
        .create()
        // Described, not kept as the source: librdkafka's own text may echo
        // a property's value (a password), which `describe` hides.
        .map_err(|e| Error::publisher(format!("kafka publisher: {}", config.describe(&e))))
}

impl Publisher for KafkaPublisher {
    const NAME: &'static str = "kafka";
    // The idempotent producer keeps order per partition, and the key (the aggregate id) picks the partition.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Sequential;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        self.publish_reporting(batch, &crate::Accepted::ignored())
            .await
    }

    /// Each delivery report is passed on as it arrives: a topic whose
    /// partition leader is slow or moving holds only its own messages, not
    /// the rest of the batch.
    async fn publish_reporting(
        &self,
        batch: &[Message],
        accepted: &crate::Accepted,
    ) -> Vec<Outcome> {
        let producer = self.current();
        let bodies: Vec<&str> = batch.iter().map(|m| m.payload.get()).collect();
        let names: Vec<&str> = batch
            .iter()
            .filter(|m| self.check_topic(&m.topic).is_ok())
            .map(|m| m.topic.as_str())
            .collect();
        let missing = self
            .topics
            .missing(&producer, &names, self.config.metadata_timeout())
            .await;
        let mut deliveries = Vec::with_capacity(batch.len());
        for (m, body) in batch.iter().zip(&bodies) {
            let (headers, headers_size) = self.headers_sized(m);
            // librdkafka checks this too, but names no limit in its error.
            let checked = self.check_topic(&m.topic).and_then(|()| {
                if missing.contains(m.topic.as_str()) {
                    return Err(topics::missing_error(&m.topic));
                }
                let size = RECORD_OVERHEAD + m.aggregate_id.len() + body.len() + headers_size;
                limits::size(
                    "kafka",
                    size,
                    "Kafka producer message.max.bytes",
                    self.config.message_max_bytes,
                )
            });
            if let Err(e) = checked {
                deliveries.push(Err(e));
                continue;
            }
            let record = FutureRecord::to(&m.topic)
                .key(&m.aggregate_id)
                .payload(*body)
                .headers(headers);
            deliveries.push(
                producer
                    .send_result(record)
                    .map_err(|(e, _)| classify(&e, &m.topic)),
            );
        }
        let outcomes = join_all(batch.iter().zip(deliveries).enumerate().map(
            |(i, (m, d))| async move {
                let outcome = match d?.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => Err(classify(&e, &m.topic)),
                    Err(_) => Err(PublishError::retryable(
                        "kafka: the producer went away before reporting delivery",
                    )),
                };
                if outcome.is_ok() {
                    accepted.accepted(i);
                }
                outcome
            },
        ))
        .await;
        // An idempotent producer that hit a fatal error (a sequence gap, a
        // fenced epoch) refuses everything after; start a fresh one.
        if let Some((reason, code)) = producer.client().fatal_error() {
            tracing::warn!(%reason, ?code, "kafka producer failed fatally; recreating it");
            if let Ok(fresh) = producer_or_log(&self.config) {
                *self.producer.lock().expect("producer lock") = fresh;
            }
        }
        outcomes
    }

    async fn check(&self) -> Result<(), PublishError> {
        let producer = self.current();
        let timeout = self.config.message_timeout.min(Duration::from_secs(10));
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, timeout)
                .map(drop)
                .map_err(|e| PublishError::retryable(format!("kafka unreachable: {e}")))
        })
        .await
        .unwrap_or_else(|e| Err(PublishError::retryable(format!("kafka check: {e}"))))
    }
}

fn producer_or_log(config: &KafkaConfig) -> Result<FutureProducer> {
    producer(config)
        .inspect_err(|e| tracing::error!(error = %e, "cannot recreate the kafka producer"))
}

/// Errors about the message or its topic (too large, invalid, topic unknown
/// or forbidden, refused by policy) are permanent; everything else (delivery
/// timeout, full local queue, broker down, leader moving) is retryable.
fn classify(e: &KafkaError, topic: &str) -> PublishError {
    use RDKafkaErrorCode as C;
    let permanent = matches!(
        e.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessage
                | C::InvalidMessageSize
                | C::InvalidRecord
                | C::InvalidTopic
                | C::UnknownTopic
                | C::UnknownTopicOrPartition
                | C::TopicAuthorizationFailed
                | C::PolicyViolation
                | C::InvalidArgument
                | C::UnsupportedForMessageFormat
        )
    );
    if permanent {
        PublishError::permanent(format!("kafka refused a message for topic {topic}: {e}"))
    } else {
        PublishError::retryable(format!("kafka: topic {topic}: {e}"))
    }
}

impl Declared for KafkaPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
