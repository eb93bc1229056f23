//! The extension point: a [`Publisher`] takes a batch and reports, per
//! message, success or a failure classed retryable or permanent.

use crate::Message;
use std::future::Future;
use std::time::Duration;

/// Whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Transient: the destination is down, overloaded or timed out.
    Retryable,
    /// No retry will fix it: rejected payload, unknown destination, ...
    Permanent,
}

/// A failed publication of one message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PublishError {
    /// Retryable or permanent.
    pub class: ErrorClass,
    /// What went wrong, stored in `last_error` / `dead_reason`.
    pub message: String,
    /// The destination asked to wait this long (HTTP `Retry-After`, ...).
    pub retry_after: Option<Duration>,
}

impl PublishError {
    /// A transient failure.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Retryable,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A failure no retry fixes.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Permanent,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether trying again can help.
    pub fn is_retryable(&self) -> bool {
        self.class == ErrorClass::Retryable
    }

    /// The most of a message stored in `last_error` / `dead_reason`, in
    /// bytes: enough for any diagnosis, and a destination that answers with
    /// megabytes cannot grow the outbox table by as much per attempt.
    pub const MAX_STORED: usize = 4 * 1024;

    /// `message` as stored: cut to [`Self::MAX_STORED`] bytes at a char
    /// boundary, and NUL (which PostgreSQL `text` refuses, failing the
    /// whole settle) replaced by U+FFFD.
    pub fn stored(message: &str) -> std::borrow::Cow<'_, str> {
        let end = |s: &str| {
            let mut end = s.len().min(Self::MAX_STORED);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            end
        };
        if message.contains('\0') {
            let mut cleaned = message.replace('\0', "\u{fffd}");
            cleaned.truncate(end(&cleaned));
            cleaned.into()
        } else {
            message[..end(message)].into()
        }
    }
}

/// The outcome for one message of a batch.
pub type Outcome = Result<(), PublishError>;

/// What a publisher does with several messages of one aggregate in one
/// batch: whether the relay may hand it a chain of them at once (with
/// ordering on, message k+1 of an aggregate must not reach the destination
/// before message k).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOrder {
    /// The whole batch is accepted or refused together (one INSERT).
    Atomic,
    /// Sent in batch order on one connection, and the destination keeps
    /// that order (pipelined Redis `XADD`, one AMQP channel, NATS on one
    /// connection, Kafka's idempotent producer). A destination that refuses
    /// message k while accepting k+1 breaks order; the relay counts it in
    /// `outbox_order_breaks_total`.
    Sequential,
    /// Messages may be in flight together and overtake each other (HTTP
    /// requests in parallel): the relay hands over at most one message per
    /// aggregate at a time, in waves.
    Concurrent,
}

/// Where a publisher tells the relay, before the whole batch is done, that
/// a message was durably accepted
/// ([`Publisher::publish_reporting`]): the relay marks it sent while the
/// slower messages of the batch (a Kafka topic whose leader is moving, a
/// webhook that answers slowly) are still in flight.
#[derive(Debug, Default)]
pub struct Accepted(Option<tokio::sync::mpsc::UnboundedSender<usize>>);

impl Accepted {
    /// Reports that nobody reads: what [`Publisher::publish`] passes.
    pub fn ignored() -> Self {
        Self(None)
    }

    /// A sender and the receiver of the batch indexes it is told of.
    pub(crate) fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<usize>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Self(Some(tx)), rx)
    }

    /// Message `index` of the batch was durably accepted; its outcome in
    /// what the publish returns must then be `Ok`.
    pub fn accepted(&self, index: usize) {
        if let Some(tx) = &self.0 {
            // The relay stopped listening (the publish missed its deadline):
            // the outcome the publish returns still counts.
            let _ = tx.send(index);
        }
    }
}

/// A destination for outbox messages.
///
/// `publish` must return exactly one outcome per message, in batch order,
/// and must only report `Ok` once the destination has durably accepted the
/// message (a confirm, an ack, a committed insert).
pub trait Publisher: Send + Sync {
    /// Short name for logs and metrics (`postgres`, `redis`, ...): what
    /// [`name`](Self::name) says unless it is overridden.
    const NAME: &'static str = "custom";

    /// Whether a batch may carry several messages of one aggregate: what
    /// [`batch_order`](Self::batch_order) says unless it is overridden. The
    /// default is the safe one, one message per aggregate at a time.
    const BATCH_ORDER: BatchOrder = BatchOrder::Concurrent;

    /// Short name for logs and metrics; [`NAME`](Self::NAME) unless the
    /// value decides (as [`crate::publishers::AnyPublisher`]'s does).
    fn name(&self) -> &str {
        Self::NAME
    }

    /// Publishes a batch.
    fn publish(&self, batch: &[Message]) -> impl Future<Output = Vec<Outcome>> + Send;

    /// As [`publish`](Self::publish), telling `accepted` of each message as
    /// soon as the destination has durably accepted it, so that the relay
    /// can mark it sent without waiting for the rest of the batch. What the
    /// relay calls; the default tells nothing early. Worth overriding where
    /// acknowledgements arrive one by one (Kafka's delivery reports).
    fn publish_reporting(
        &self,
        batch: &[Message],
        accepted: &Accepted,
    ) -> impl Future<Output = Vec<Outcome>> + Send {
        let _ = accepted;
        self.publish(batch)
    }

    /// Checks the destination is reachable.
    fn check(&self) -> impl Future<Output = Result<(), PublishError>> + Send;

    /// Whether a batch may carry several messages of one aggregate;
    /// [`BATCH_ORDER`](Self::BATCH_ORDER) unless the value decides.
    fn batch_order(&self) -> BatchOrder {
        Self::BATCH_ORDER
    }
}

impl<P: Publisher> Publisher for std::sync::Arc<P> {
    const NAME: &'static str = P::NAME;
    const BATCH_ORDER: BatchOrder = P::BATCH_ORDER;
    fn name(&self) -> &str {
        (**self).name()
    }
    fn publish(&self, batch: &[Message]) -> impl Future<Output = Vec<Outcome>> + Send {
        (**self).publish(batch)
    }
    fn publish_reporting(
        &self,
        batch: &[Message],
        accepted: &Accepted,
    ) -> impl Future<Output = Vec<Outcome>> + Send {
        (**self).publish_reporting(batch, accepted)
    }
    fn check(&self) -> impl Future<Output = Result<(), PublishError>> + Send {
        (**self).check()
    }
    fn batch_order(&self) -> BatchOrder {
        (**self).batch_order()
    }
}
