//! A claimed message, as every publisher receives it.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use uuid::Uuid;

/// One claimed outbox row: the envelope publishers carry to the broker.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Row id in `<schema>.messages`.
    pub id: i64,
    /// Deduplication key for consumers.
    pub event_id: Uuid,
    /// What happened, e.g. `order.created`.
    pub event_type: String,
    /// Payload schema version.
    pub event_version: i32,
    /// Kind of entity the event is about, e.g. `order`.
    pub aggregate_type: String,
    /// Which entity; brokers with keys use it for per-entity ordering.
    pub aggregate_id: String,
    /// Stream, subject or routing key.
    pub topic: String,
    /// The event body.
    pub payload: serde_json::Value,
    /// Headers carried through (trace context, ...).
    pub headers: BTreeMap<String, String>,
    /// Publication attempts so far, this one included.
    pub attempts: i32,
    /// When the producer's transaction wrote the row.
    pub created_at: DateTime<Utc>,
}
