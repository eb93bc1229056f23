//! Every metric the relay emits: the names (constants, so dashboards and
//! tests grep one place) and one function per event that logs and counts in
//! the same call (the style of Vector's `internal_events`).
//!
//! Emission goes through the [`metrics`] facade: without a recorder
//! installed every call is a no-op, so an application embedding the relay
//! pays nothing unless it exports. `outbox relay --metrics-addr` installs a
//! Prometheus recorder and serves `/metrics`.
//!
//! # Label cardinality
//! `outbox_published_total` carries a `topic` label. Topics are data, and an
//! application that puts an id in its topic names would create one time
//! series per id. [`set_topic_labels`] caps the number of distinct topics
//! (the rest are counted under `topic="_other"`) or drops the label.

use crate::publisher::ErrorClass;
use crate::{Message, Outcome};
use chrono::Utc;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Gauge: messages in the hot table, by `status` (pending, processing,
/// failed, dead). Refreshed on an interval by [`crate::backlog`].
pub const MESSAGES: &str = "outbox_messages";
/// Gauge: age in seconds of the oldest message waiting to be published
/// (pending or failed); 0 when none waits.
pub const OLDEST_PENDING_AGE: &str = "outbox_oldest_pending_age_seconds";
/// Counter: messages the destination acknowledged, by `topic` and `publisher`.
pub const PUBLISHED: &str = "outbox_published_total";
/// Counter: failed publications of one message, by `class` (retryable, permanent).
pub const PUBLISH_FAILURES: &str = "outbox_publish_failures_total";
/// Counter: messages settled as failed, to be retried later.
pub const RETRIES: &str = "outbox_retries_total";
/// Counter: messages settled as dead (permanent error or attempts used up).
pub const DEAD: &str = "outbox_dead_total";
/// Counter: messages handed back to pending without spending an attempt
/// (destination down, or shutdown).
pub const RELEASED: &str = "outbox_released_total";
/// Counter: messages recovered from expired leases (a relay died holding them).
pub const LEASE_RECOVERED: &str = "outbox_lease_recovered_total";
/// Histogram: seconds one publisher call took for a batch.
pub const PUBLISH_DURATION: &str = "outbox_publish_duration_seconds";
/// Histogram: seconds from the row's `created_at` to the destination's
/// acknowledgement, per message. `created_at` is the database's clock (the
/// producer's transaction start) and the acknowledgement the relay's, so
/// clock skew between the two hosts shifts it.
pub const COMMIT_TO_PUBLISH: &str = "outbox_commit_to_publish_seconds";
/// Histogram: rows per non-empty claim.
pub const CLAIM_BATCH_SIZE: &str = "outbox_claim_batch_size";
/// Gauge: 1 while the circuit breaker is open (destination unreachable).
pub const BREAKER_OPEN: &str = "outbox_breaker_open";
/// Counter: messages a destination accepted after refusing an earlier
/// message of the same aggregate in the same batch (a pipelined publisher
/// whose broker refused one command): delivered out of order.
pub const ORDER_BREAKS: &str = "outbox_order_breaks_total";

/// Every metric name, for exporters and tests.
pub const ALL: &[&str] = &[
    MESSAGES,
    OLDEST_PENDING_AGE,
    PUBLISHED,
    PUBLISH_FAILURES,
    RETRIES,
    DEAD,
    RELEASED,
    LEASE_RECOVERED,
    PUBLISH_DURATION,
    COMMIT_TO_PUBLISH,
    CLAIM_BATCH_SIZE,
    BREAKER_OPEN,
    ORDER_BREAKS,
];

/// Histogram buckets in seconds, from a fast local broker (ms) to a long
/// backlog (hours), for both latency histograms.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
];

/// Buckets for [`CLAIM_BATCH_SIZE`] (the batch size is at most 10,000).
pub const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

/// The value of the `topic` label once the cap is reached.
pub const OTHER_TOPIC: &str = "_other";

/// How `outbox_published_total` labels topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicLabels {
    /// The first `n` distinct topics seen keep their name; later ones are
    /// counted as [`OTHER_TOPIC`].
    Capped(usize),
    /// Every topic is counted as [`OTHER_TOPIC`]: one series per publisher.
    Off,
}

/// The default cap: enough for any sane set of streams, small enough that
/// an id in a topic name cannot blow up the scrape.
pub const DEFAULT_TOPIC_CAP: usize = 100;

impl Default for TopicLabels {
    fn default() -> Self {
        Self::Capped(DEFAULT_TOPIC_CAP)
    }
}

struct TopicSet {
    policy: TopicLabels,
    seen: HashSet<String>,
}

fn topics() -> &'static Mutex<TopicSet> {
    static TOPICS: OnceLock<Mutex<TopicSet>> = OnceLock::new();
    TOPICS.get_or_init(|| {
        Mutex::new(TopicSet {
            policy: TopicLabels::default(),
            seen: HashSet::new(),
        })
    })
}

/// Sets how topics are labelled (process-wide, like the recorder itself).
pub fn set_topic_labels(policy: TopicLabels) {
    let mut t = topics().lock().unwrap();
    t.policy = policy;
    t.seen.clear();
}

/// Bytes of a topic kept in its label: a series' name is in every scrape,
/// and a 1 MiB topic once made `/metrics` 50 MiB. Longer topics are cut
/// (with a marker saying how much), and topics that agree on their first
/// bytes share a series.
pub const TOPIC_LABEL_MAX: usize = 128;

fn topic_label(topic: &str) -> String {
    let topic = &*crate::store::cut(topic, TOPIC_LABEL_MAX);
    let mut t = topics().lock().unwrap();
    match t.policy {
        TopicLabels::Off => OTHER_TOPIC.to_owned(),
        TopicLabels::Capped(_) if t.seen.contains(topic) => topic.to_owned(),
        TopicLabels::Capped(cap) if t.seen.len() < cap => {
            t.seen.insert(topic.to_owned());
            topic.to_owned()
        }
        TopicLabels::Capped(_) => OTHER_TOPIC.to_owned(),
    }
}

/// Registers descriptions for every metric, so the exporter prints `# HELP`.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(MESSAGES, "Messages in the outbox's hot table, by status.");
    describe_gauge!(
        OLDEST_PENDING_AGE,
        Unit::Seconds,
        "Age of the oldest message waiting to be published."
    );
    describe_counter!(PUBLISHED, "Messages the destination acknowledged.");
    describe_counter!(PUBLISH_FAILURES, "Failed publications, by error class.");
    describe_counter!(RETRIES, "Messages scheduled for another attempt.");
    describe_counter!(DEAD, "Messages moved to the dead-letter state.");
    describe_counter!(
        RELEASED,
        "Messages handed back without spending an attempt."
    );
    describe_counter!(LEASE_RECOVERED, "Messages recovered from expired leases.");
    describe_histogram!(
        PUBLISH_DURATION,
        Unit::Seconds,
        "Duration of one publisher call for a batch."
    );
    describe_histogram!(
        COMMIT_TO_PUBLISH,
        Unit::Seconds,
        "From the row's created_at to the destination's acknowledgement."
    );
    describe_histogram!(CLAIM_BATCH_SIZE, "Rows per non-empty claim.");
    describe_gauge!(BREAKER_OPEN, "1 while the circuit breaker is open.");
    describe_counter!(
        ORDER_BREAKS,
        "Messages accepted after an earlier one of their aggregate was refused in the same batch."
    );
    // Series that exist from the start read as 0 rather than "no data", so
    // `increase()` and absent-series alerts behave from the first scrape.
    for class in ["retryable", "permanent"] {
        metrics::counter!(PUBLISH_FAILURES, "class" => class).increment(0);
    }
    for c in [RETRIES, DEAD, RELEASED, LEASE_RECOVERED, ORDER_BREAKS] {
        metrics::counter!(c).increment(0);
    }
}

/// A non-empty claim of `rows` rows.
pub(crate) fn claimed(rows: usize) {
    metrics::histogram!(CLAIM_BATCH_SIZE).record(rows as f64);
}

/// The publisher answered for a batch after `took`: per-message outcomes
/// are counted, and each acknowledged message's commit-to-publish latency
/// recorded.
pub(crate) fn batch_published(
    publisher: &str,
    messages: &[Message],
    outcomes: &[Outcome],
    took: Duration,
) {
    metrics::histogram!(PUBLISH_DURATION).record(took.as_secs_f64());
    let now = Utc::now();
    let (mut retryable, mut permanent) = (0u64, 0u64);
    for (m, o) in messages.iter().zip(outcomes) {
        match o {
            Ok(()) => {
                let topic = topic_label(&m.topic);
                metrics::counter!(PUBLISHED, "topic" => topic, "publisher" => publisher.to_owned())
                    .increment(1);
                let latency = (now - m.created_at).num_microseconds().unwrap_or(0).max(0);
                metrics::histogram!(COMMIT_TO_PUBLISH).record(latency as f64 / 1e6);
            }
            Err(e) if e.class == ErrorClass::Retryable => retryable += 1,
            Err(_) => permanent += 1,
        }
    }
    if retryable + permanent > 0 {
        tracing::debug!(
            publisher,
            retryable,
            permanent,
            "publisher refused messages"
        );
        metrics::counter!(PUBLISH_FAILURES, "class" => "retryable").increment(retryable);
        metrics::counter!(PUBLISH_FAILURES, "class" => "permanent").increment(permanent);
    }
}

/// Rows settled: `failed` will be retried, `dead` gave up, `released` went
/// back untouched.
pub(crate) fn settled(failed: u64, dead: u64, released: u64) {
    if dead > 0 {
        tracing::warn!(count = dead, "messages moved to dead letters");
    }
    metrics::counter!(RETRIES).increment(failed);
    metrics::counter!(DEAD).increment(dead);
    metrics::counter!(RELEASED).increment(released);
}

/// Messages delivered after an earlier one of their aggregate was refused.
pub(crate) fn order_breaks(count: u64) {
    if count > 0 {
        tracing::warn!(
            count,
            "the destination accepted messages after refusing an earlier one of their aggregate: delivered out of order"
        );
    }
    metrics::counter!(ORDER_BREAKS).increment(count);
}

/// Rows recovered from expired leases.
pub(crate) fn lease_recovered(count: usize) {
    if count > 0 {
        tracing::warn!(count, "recovered messages from expired leases");
    }
    metrics::counter!(LEASE_RECOVERED).increment(count as u64);
}

/// The breaker's state.
pub(crate) fn breaker(open: bool) {
    metrics::gauge!(BREAKER_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// The backlog as last counted.
pub(crate) fn backlog(counts: &[(&'static str, i64)], oldest: Option<Duration>) {
    for (status, n) in counts {
        metrics::gauge!(MESSAGES, "status" => *status).set(*n as f64);
    }
    metrics::gauge!(OLDEST_PENDING_AGE).set(oldest.map_or(0.0, |d| d.as_secs_f64()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_labels_are_capped_then_dropped() {
        set_topic_labels(TopicLabels::Capped(2));
        assert_eq!(topic_label("a"), "a");
        assert_eq!(topic_label("b"), "b");
        assert_eq!(topic_label("c"), OTHER_TOPIC);
        assert_eq!(topic_label("a"), "a");
        set_topic_labels(TopicLabels::Off);
        assert_eq!(topic_label("a"), OTHER_TOPIC);
        set_topic_labels(TopicLabels::Capped(2));
        let long = "t".repeat(1 << 20);
        let label = topic_label(&long);
        assert!(label.len() < TOPIC_LABEL_MAX + 40, "{}", label.len());
        assert!(label.ends_with("bytes cut]"), "{label}");
        set_topic_labels(TopicLabels::default());
    }
}
