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
    fn check(&self) -> impl Future<Output = Result<(), PublishError>> + Send {
        (**self).check()
    }
    fn batch_order(&self) -> BatchOrder {
        (**self).batch_order()
    }
}
