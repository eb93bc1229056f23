//! What the broker's metadata says of the topics a batch names. librdkafka
//! holds a message for a topic it cannot find until its message timeout
//! (30 s by default) and then reports a generic retryable timeout, and the
//! relay waits for every report of the batch: one missing topic held the
//! whole batch and its messages were retried for nothing. A topic seen for
//! the first time is looked up instead; the broker answers at once.
//!
//! The lookup asks the broker to create the topic only as the producer
//! would (`allow.auto.create.topics`, true for a producer): a broker that
//! creates topics on demand creates it, and its messages go out.

use crate::PublishError;
use futures_util::future::join_all;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a topic found stays trusted without asking again (a topic
/// deleted meanwhile fails as before, by librdkafka's report).
const FOUND_FOR: Duration = Duration::from_secs(300);

/// How long a missing topic stays missing: created by an operator, its next
/// messages go out after this.
const MISSING_FOR: Duration = Duration::from_secs(10);

/// Topics looked up for one batch at the most, each a round trip on a
/// blocking thread; the others are produced as before and looked up with a
/// later batch (producers name topics, and plain SQL can name thousands).
const LOOKUPS_PER_BATCH: usize = 8;

/// Topics remembered; past this the cache starts afresh.
const MAX_TOPICS: usize = 10_000;

/// The answers of the last lookups: whether the topic exists, and when.
#[derive(Debug, Default)]
pub(super) struct TopicCache {
    seen: Mutex<HashMap<String, (bool, Instant)>>,
}

impl TopicCache {
    /// Of `names`, the topics the broker says do not exist, looking up
    /// (within `timeout` each) those not answered lately. A topic the
    /// broker did not answer for is not missing: its messages are produced
    /// and librdkafka reports on them.
    pub async fn missing(
        &self,
        producer: &FutureProducer,
        names: &[&str],
        timeout: Duration,
    ) -> HashSet<String> {
        let now = Instant::now();
        let mut missing = HashSet::new();
        let mut ask: Vec<String> = Vec::new();
        {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            for &name in names.iter().collect::<HashSet<_>>() {
                match seen.get(name) {
                    Some((true, at)) if now.duration_since(*at) < FOUND_FOR => {}
                    Some((false, at)) if now.duration_since(*at) < MISSING_FOR => {
                        missing.insert(name.to_owned());
                    }
                    _ if ask.len() < LOOKUPS_PER_BATCH => ask.push(name.to_owned()),
                    _ => {}
                }
            }
        }
        let answers = join_all(ask.into_iter().map(|topic| {
            let producer = producer.clone();
            async move {
                let name = topic.clone();
                let found = tokio::task::spawn_blocking(move || lookup(&producer, &name, timeout))
                    .await
                    .ok()
                    .flatten();
                (topic, found)
            }
        }))
        .await;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() + answers.len() > MAX_TOPICS {
            seen.clear();
        }
        for (topic, found) in answers {
            let Some(exists) = found else { continue };
            if !exists {
                tracing::warn!(%topic, "kafka topic does not exist; its messages go dead");
                missing.insert(topic.clone());
            }
            seen.insert(topic, (exists, now));
        }
        missing
    }
}

/// Whether the broker knows `topic` (`None`: no clear answer in time, or
/// an error other than an unknown topic, such as a leader being elected
/// just after the topic was created).
fn lookup(producer: &FutureProducer, topic: &str, timeout: Duration) -> Option<bool> {
    let unknown = |c: RDKafkaErrorCode| {
        matches!(
            c,
            RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
        )
    };
    match producer.client().fetch_metadata(Some(topic), timeout) {
        Ok(md) => {
            let t = md.topics().iter().find(|t| t.name() == topic)?;
            match t.error().map(RDKafkaErrorCode::from) {
                None => Some(true),
                Some(c) if unknown(c) => Some(false),
                Some(_) => None,
            }
        }
        Err(KafkaError::MetadataFetch(c)) if unknown(c) => Some(false),
        Err(_) => None,
    }
}

/// The permanent failure of a message whose topic does not exist.
pub(super) fn missing_error(topic: &str) -> PublishError {
    PublishError::permanent(format!(
        "kafka: topic {topic} does not exist and the broker does not create topics \
         (UnknownTopicOrPartition in its metadata); create it, then replay the message"
    ))
}
