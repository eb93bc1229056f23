//! A transactional outbox for PostgreSQL: write your business rows and the
//! events about them in **one** transaction; the `outbox` relay publishes
//! them afterwards, at least once.
//!
//! ```no_run
//! # async fn demo(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use outbox::{NewMessage, Outbox};
//! use serde_json::json;
//!
//! let outbox = Outbox::new("outbox")?;
//! let tx = client.transaction().await?;
//! let order_id: i64 = tx.query_one("INSERT INTO orders (total) VALUES (1999) RETURNING id", &[])
//!     .await?.get(0);
//! let msg = NewMessage::new("order.created", "order", order_id.to_string(),
//!                           &json!({"order_id": order_id, "total": 1999}))?;
//! let enqueued = outbox.enqueue(&tx, &msg).await?;   // never commits
//! tx.commit().await?;                                 // both rows, or neither
//! # let _ = enqueued; Ok(()) }
//! ```
//!
//! # Layout
//! - [`NewMessage`], [`Enqueued`]: the message model.
//! - [`Outbox`]: `enqueue` / `enqueue_many` on the caller's connection or
//!   transaction; `migrate`.
//! - [`Inbox`]: consumer-side deduplication by `event_id` (a `Uuid`).
//! - [`sql`]: the migrations, the roles' grants, and `render`; the
//!   library's own statements (enqueue, inbox) are private, in
//!   `sql/queries.rs`. Nothing of the relay's claim/settle machinery is
//!   here: its statements and row types are in the `outbox-relay` crate.
//! - [`Schema`]: the validated schema name, the only identifier spliced into SQL.
//! - Trace context: [`NewMessage::trace_context`] (and, with the
//!   `opentelemetry` feature, `NewMessage::current_trace_context`) put the
//!   W3C `traceparent`/`tracestate` in the headers the relay forwards.
//! - [`RESERVED_HEADERS`]: header names the envelope owns, refused at enqueue.
//! - Drivers: tokio-postgres (feature `tokio-postgres`, default) and sqlx
//!   (feature `sqlx`), both through [`Executor`].

mod driver;
mod error;
mod headers;
mod inbox;
mod message;
mod schema;
pub mod sql;
mod trace;

pub use driver::Executor;
#[cfg(feature = "tokio-postgres")]
pub use error::describe_tokio_postgres;
pub use error::{Error, ErrorKind, InvalidMessage, Result};
pub use headers::{reserved_header, RESERVED_HEADERS, RESERVED_HEADER_PREFIXES};
pub use inbox::{Delivery, Inbox};
pub use message::{Enqueued, NewMessage};
pub use schema::{validate_identifier, Schema, DEFAULT_SCHEMA};
pub use trace::{TRACEPARENT, TRACESTATE};
/// Event ids are UUIDs (v7 when the library makes them): re-exported so an
/// application needs no `uuid` dependency of its own to pass one.
pub use uuid::Uuid;

use message::Columns;
use std::sync::Arc;

/// Default limit on a serialized payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The producer side of the outbox for one schema. Cheap to clone; build it
/// once at startup.
#[derive(Debug, Clone)]
pub struct Outbox {
    schema: Schema,
    queries: Arc<sql::Queries>,
    max_payload_bytes: usize,
}

impl Outbox {
    /// The outbox in `schema` (validated), with default limits.
    pub fn new(schema: &str) -> Result<Self> {
        Ok(Self::with_schema(Schema::new(schema)?))
    }

    /// The outbox in an already validated schema.
    pub fn with_schema(schema: Schema) -> Self {
        Self {
            queries: Arc::new(sql::Queries::new(&schema)),
            schema,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }

    /// Refuses payloads whose JSON text is longer than `bytes`.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// The schema this outbox writes to.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Writes one message on `conn`, inside whatever transaction `conn` is
    /// in. Never begins, commits or rolls back. Invalid input is refused
    /// before anything is sent to the database.
    pub async fn enqueue<E: Executor>(&self, conn: E, message: &NewMessage) -> Result<Enqueued> {
        let columns = Columns::build(std::slice::from_ref(message), self.max_payload_bytes)?;
        conn.insert_one(&self.queries.enqueue_one, columns).await
    }

    /// Writes many messages in one round trip (one `INSERT ... unnest`),
    /// returned in input order. All are validated first; one bad message
    /// means none is written.
    pub async fn enqueue_many<E: Executor>(
        &self,
        conn: E,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let columns = Columns::build(messages, self.max_payload_bytes)?;
        conn.insert_many(&self.queries.enqueue_many, columns).await
    }

    /// Creates or upgrades the schema; idempotent and safe to run from many
    /// processes at once (an advisory lock serialises them). Run it on a
    /// connection that is not in a transaction, or inside one of yours:
    /// either way the upgrade is all or nothing.
    pub async fn migrate<E: Executor>(&self, conn: E) -> Result<()> {
        migrate(conn, &self.schema).await
    }
}

/// Creates or upgrades `schema` to the latest migration (see [`Outbox::migrate`]).
pub async fn migrate<E: Executor>(conn: E, schema: &Schema) -> Result<()> {
    // The script has no BEGIN/COMMIT: sent as one simple query it runs in one
    // implicit transaction, or inside the caller's if there is one.
    conn.execute_script(&sql::migrate_script(schema)).await
}
