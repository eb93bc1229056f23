//! The message an application enqueues, and what it gets back.

use crate::error::InvalidMessage;
use crate::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use uuid::Uuid;

/// An event to write into the outbox in the caller's transaction.
///
/// ```
/// use outbox::NewMessage;
/// let msg = NewMessage::new("order.created", "order", "42", &serde_json::json!({"total": 1999}))
///     .unwrap()
///     .topic("orders")
///     .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert_eq!(msg.topic_name(), "orders");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub(crate) event_id: Option<Uuid>,
    pub(crate) event_type: String,
    pub(crate) event_version: i32,
    pub(crate) aggregate_type: String,
    pub(crate) aggregate_id: String,
    pub(crate) topic: String,
    pub(crate) payload: serde_json::Value,
    pub(crate) headers: BTreeMap<String, String>,
}

impl NewMessage {
    /// A message of `event_type` about aggregate `aggregate_type`/`aggregate_id`,
    /// with `payload` serialized to JSON. The topic defaults to `event_type`
    /// and the version to 1.
    pub fn new(
        event_type: impl Into<String>,
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        payload: &impl Serialize,
    ) -> Result<Self> {
        let event_type = event_type.into();
        Ok(Self {
            event_id: None,
            topic: event_type.clone(),
            event_type,
            event_version: 1,
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            payload: serde_json::to_value(payload)?,
            headers: BTreeMap::new(),
        })
    }

    /// Sets the topic (stream, subject, routing key) the relay publishes to.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// Sets the schema version of the payload.
    pub fn version(mut self, version: i32) -> Self {
        self.event_version = version;
        self
    }

    /// Adds a header carried to the broker (trace context, tenant, ...).
    /// Names the envelope owns ([`crate::RESERVED_HEADERS`]: `id`,
    /// `source`, `type`, `data`, `event_id`, `ce-*`, ...) are refused when
    /// the message is enqueued.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    /// Carries a W3C trace context: `traceparent` (checked) and, if given
    /// and not empty, `tracestate`, as the headers of the same names. Every
    /// publisher forwards headers, so the consumer can continue the trace.
    ///
    /// ```
    /// use outbox::NewMessage;
    /// let msg = NewMessage::new("order.created", "order", "42", &1).unwrap()
    ///     .trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Some("rojo=1"))
    ///     .unwrap();
    /// assert!(NewMessage::new("e", "a", "1", &1).unwrap().trace_context("nope", None).is_err());
    /// ```
    pub fn trace_context(mut self, traceparent: &str, tracestate: Option<&str>) -> Result<Self> {
        crate::trace::check_traceparent(traceparent).map_err(Error::InvalidMessage)?;
        self.headers
            .insert(crate::trace::TRACEPARENT.to_owned(), traceparent.to_owned());
        match tracestate.filter(|s| !s.is_empty()) {
            Some(state) => {
                crate::trace::check_tracestate(state).map_err(Error::InvalidMessage)?;
                self.headers
                    .insert(crate::trace::TRACESTATE.to_owned(), state.to_owned());
            }
            None => {
                self.headers.remove(crate::trace::TRACESTATE);
            }
        }
        Ok(self)
    }

    /// Carries the trace context of the current OpenTelemetry span (see
    /// [`Self::trace_context`]); unchanged outside a valid span.
    #[cfg(feature = "opentelemetry")]
    pub fn current_trace_context(mut self) -> Self {
        use crate::trace::{check_tracestate, TRACEPARENT, TRACESTATE};
        let Some((parent, state)) = crate::trace::current() else {
            return self;
        };
        // OpenTelemetry formats valid ids itself; a tracestate too long to
        // carry is dropped rather than failing the caller's enqueue.
        self.headers.insert(TRACEPARENT.to_owned(), parent);
        if !state.is_empty() && check_tracestate(&state).is_ok() {
            self.headers.insert(TRACESTATE.to_owned(), state);
        } else {
            self.headers.remove(TRACESTATE);
        }
        self
    }

    /// Uses a caller-chosen event id (for example one derived from a request
    /// id, so a retried request cannot enqueue the same event twice). Without
    /// it a time-ordered UUIDv7 is generated.
    pub fn event_id(mut self, id: Uuid) -> Self {
        self.event_id = Some(id);
        self
    }

    /// The topic the message will be published to.
    pub fn topic_name(&self) -> &str {
        &self.topic
    }
}

/// What `enqueue` returns for each message written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Enqueued {
    /// The row id in `<schema>.messages`.
    pub id: i64,
    /// The event id consumers deduplicate by.
    pub event_id: Uuid,
}

/// Messages turned into column arrays, validated, ready for one
/// `INSERT ... SELECT FROM unnest(...)`.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Columns {
    pub(crate) event_id: Vec<Uuid>,
    pub(crate) event_type: Vec<String>,
    pub(crate) event_version: Vec<i32>,
    pub(crate) aggregate_type: Vec<String>,
    pub(crate) aggregate_id: Vec<String>,
    pub(crate) topic: Vec<String>,
    pub(crate) payload: Vec<serde_json::Value>,
    pub(crate) headers: Vec<serde_json::Value>,
}

impl Columns {
    pub(crate) fn build(messages: &[NewMessage], max_payload_bytes: usize) -> Result<Self> {
        let mut c = Columns::default();
        let mut seen = std::collections::HashSet::with_capacity(messages.len());
        for m in messages {
            validate(m, max_payload_bytes)?;
            let event_id = m.event_id.unwrap_or_else(Uuid::now_v7);
            if !seen.insert(event_id) {
                return Err(Error::InvalidMessage(InvalidMessage::DuplicateEventId(
                    event_id,
                )));
            }
            c.event_id.push(event_id);
            c.event_type.push(m.event_type.clone());
            c.event_version.push(m.event_version);
            c.aggregate_type.push(m.aggregate_type.clone());
            c.aggregate_id.push(m.aggregate_id.clone());
            c.topic.push(m.topic.clone());
            c.payload.push(m.payload.clone());
            c.headers.push(serde_json::to_value(&m.headers)?);
        }
        Ok(c)
    }
}

fn validate(m: &NewMessage, max_payload_bytes: usize) -> Result<()> {
    use InvalidMessage::*;
    let err = |e| Err(Error::InvalidMessage(e));
    if m.topic.trim().is_empty() {
        return err(EmptyTopic);
    }
    if m.event_type.trim().is_empty() {
        return err(EmptyEventType);
    }
    if m.aggregate_type.trim().is_empty() {
        return err(EmptyAggregateType);
    }
    if m.event_version < 1 {
        return err(BadVersion(m.event_version));
    }
    for (field, value) in [
        ("topic", &m.topic),
        ("event_type", &m.event_type),
        ("aggregate_type", &m.aggregate_type),
        ("aggregate_id", &m.aggregate_id),
    ] {
        if value.contains('\0') {
            return err(NulByte(field));
        }
    }
    // PostgreSQL's jsonb refuses \u0000 too; serializing once here both
    // measures the payload and catches it before anything is written.
    let text = serde_json::to_string(&m.payload)?;
    if text.contains("\\u0000") {
        return err(NulByte("payload"));
    }
    if text.len() > max_payload_bytes {
        return err(PayloadTooLarge {
            size: text.len(),
            limit: max_payload_bytes,
        });
    }
    if m.headers
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return err(NulByte("headers"));
    }
    // The same rule as the messages_headers_valid CHECK, checked here so the
    // caller gets the header's name rather than a constraint violation.
    for name in m.headers.keys() {
        if let Some(reason) = crate::reserved_header(name) {
            return err(ReservedHeader {
                name: name.clone(),
                reason,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg() -> NewMessage {
        NewMessage::new("order.created", "order", "1", &json!({"a": 1})).unwrap()
    }

    #[test]
    fn topic_defaults_to_event_type() {
        assert_eq!(msg().topic_name(), "order.created");
    }

    #[test]
    fn rejects_bad_messages() {
        let cases = [
            (msg().topic(" "), "topic is empty"),
            (msg().version(0), "event_version"),
            (
                NewMessage::new("t", "order", "1", &"x".repeat(100)).unwrap(),
                "over the limit of 50 bytes",
            ),
            (
                NewMessage::new("t", "order", "1", &json!("a\u{0}b")).unwrap(),
                "payload contains a NUL",
            ),
            (msg().header("source", "x"), "header \"source\" is reserved"),
            (msg().header("data", "x"), "header \"data\" is reserved"),
            (
                msg().header("ce-type", "x"),
                "header \"ce-type\" is reserved",
            ),
            (
                msg().header("event_id", "x"),
                "header \"event_id\" is reserved",
            ),
        ];
        for (m, want) in cases {
            let err = Columns::build(&[m], 50).unwrap_err().to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }

    #[test]
    fn rejects_duplicate_event_ids_in_one_batch() {
        let id = Uuid::now_v7();
        let err = Columns::build(&[msg().event_id(id), msg().event_id(id)], 1 << 20).unwrap_err();
        assert!(err.to_string().contains("appears twice"));
    }
}
