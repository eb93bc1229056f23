//! Consumer-side idempotency: remember each processed `event_id`.

use crate::{sql::Queries, Executor, Result, Schema};
use std::sync::Arc;
use uuid::Uuid;

/// Whether an event was seen for the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// First delivery: do the work, then commit.
    First,
    /// Already processed: skip the work, just acknowledge.
    Duplicate,
}

/// Records processed event ids in `<schema>.processed_events`.
///
/// Call [`Inbox::record`] inside the same transaction as the consumer's
/// business writes: if the transaction rolls back, so does the record, and
/// the redelivered event is processed again.
#[derive(Debug, Clone)]
pub struct Inbox {
    queries: Arc<Queries>,
}

impl Inbox {
    /// The inbox in `schema` (validated).
    pub fn new(schema: &str) -> Result<Self> {
        Ok(Self::with_schema(&Schema::new(schema)?))
    }

    /// The inbox in an already validated schema.
    pub fn with_schema(schema: &Schema) -> Self {
        Self {
            queries: Arc::new(Queries::new(schema)),
        }
    }

    /// Records `event_id`, the event's id as every destination carries it
    /// (`INSERT ... ON CONFLICT DO NOTHING`), and tells whether this is its
    /// first delivery. It is stored in its hyphenated lowercase text form.
    pub async fn record<E: Executor>(
        &self,
        conn: E,
        event_id: Uuid,
        topic: &str,
    ) -> Result<Delivery> {
        let inserted = conn
            .execute_text(&self.queries.inbox_record, &event_id.to_string(), topic)
            .await?;
        Ok(if inserted == 1 {
            Delivery::First
        } else {
            Delivery::Duplicate
        })
    }
}
