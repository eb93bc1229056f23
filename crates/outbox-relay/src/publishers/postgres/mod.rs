//! `postgres`: writes each message to `<schema>.published_events`, in the
//! outbox database or (with a `postgres://` URL) in another one.
//!
//! Each row carries the whole envelope, as every broker publisher does:
//! `event_id`, `message_id`, `event_type`, `event_version`,
//! `aggregate_type`, `aggregate_id`, `topic`, `headers` (so a consumer sees
//! the producer's trace context), `payload`, and `enqueued_at`, the time the
//! producer's transaction wrote the message (the envelope's `created_at`).
//! The row's own `created_at` is the publish time. A sink table made by an
//! older build gains the missing columns when the publisher creates its sink
//! ([`PostgresPublisher::ensure_sink`]) or, in the outbox schema, through
//! migration 8.
//!
//! The insert is its own transaction, never the claim's: publishing happens
//! outside any outbox transaction, exactly as with a real broker.

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use super::kit::outcome::all_failed;
use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use outbox::Schema;
use sql::SinkQueries;
use std::sync::Arc;
use uuid::Uuid;

mod sql;

/// The PostgreSQL-table publisher.
#[derive(Clone)]
pub struct PostgresPublisher {
    pool: Pool,
    q: Arc<SinkQueries>,
    publisher: String,
}

crate::debug::debug_showing!(PostgresPublisher { publisher });

/// Connections to a sink in another database: one batch INSERT each, for
/// the relay's pipelines.
const SINK_CONNECTIONS: usize = 8;

impl PostgresPublisher {
    /// Writes into `published_events` of `schema`, through `pool`;
    /// `publisher` fills the `publisher` column.
    pub fn new(pool: Pool, schema: &Schema, publisher: impl Into<String>) -> Self {
        Self {
            pool,
            q: Arc::new(SinkQueries::new(schema)),
            publisher: publisher.into(),
        }
    }

    /// `postgres` → the outbox database; `postgres://…` → that database, whose
    /// sink table is created if missing.
    pub async fn from_url(url: &str, ctx: &PublisherContext) -> Result<Self> {
        if !url.contains("://") {
            return Ok(Self::new(ctx.pool.clone(), &ctx.schema, &ctx.relay_id));
        }
        let pool = sink_pool(url, &ctx.relay_id)?;
        let me = Self::new(pool, &ctx.schema, &ctx.relay_id);
        me.ensure_sink().await?;
        Ok(me)
    }

    /// Checks a sink URL as [`PostgresPublisher::from_url`] does, without
    /// connecting (`postgres` alone, the outbox database, is always fine).
    pub fn check_url(url: &str) -> Result<()> {
        if url.contains("://") {
            sink_pool(url, crate::connect::DEFAULT_APPLICATION_NAME)?;
        }
        Ok(())
    }

    /// Creates the sink table if it does not exist, and adds the envelope
    /// columns a table made by an older build lacks. Runs no DDL when the
    /// table is already complete, so a role with only INSERT on it (and
    /// USAGE on its schema and sequence) can deliver into a sink made by
    /// someone else.
    pub async fn ensure_sink(&self) -> Result<()> {
        let client = self.pool.get().await?;
        let ready = crate::store::conn::query(&**client, &self.q.ready, &[]).await?;
        let ready: bool = match ready.first() {
            Some(r) => crate::store::decode::get(r, "ready")?,
            None => false,
        };
        if !ready {
            client.batch_execute(&self.q.create).await?;
        }
        Ok(())
    }

    async fn insert(&self, batch: &[Message]) -> Result<(), PublishError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let ids: Vec<i64> = batch.iter().map(|m| m.id).collect();
        let event_ids: Vec<uuid::Uuid> = batch.iter().map(|m| m.event_id).collect();
        let topics: Vec<&str> = batch.iter().map(|m| m.topic.as_str()).collect();
        // The payload's JSON text, cast back to jsonb by the statement.
        let payloads: Vec<&str> = batch.iter().map(|m| m.payload.get()).collect();
        // Headers as a JSON object, as producers wrote them (trace context, ...).
        let headers: Vec<serde_json::Value> =
            batch.iter().map(|m| serde_json::json!(m.headers)).collect();
        let event_types: Vec<&str> = batch.iter().map(|m| m.event_type.as_str()).collect();
        let event_versions: Vec<i32> = batch.iter().map(|m| m.event_version).collect();
        let aggregate_types: Vec<&str> = batch.iter().map(|m| m.aggregate_type.as_str()).collect();
        let aggregate_ids: Vec<&str> = batch.iter().map(|m| m.aggregate_id.as_str()).collect();
        // The message's enqueue time; the row's created_at is the publish time.
        let enqueued_at: Vec<chrono::DateTime<chrono::Utc>> =
            batch.iter().map(|m| m.created_at).collect();
        // Unnamed, as every statement of the store: see store::conn.
        crate::store::conn::execute(
            &**client,
            &self.q.insert,
            &[
                &ids,
                &event_ids,
                &topics,
                &payloads,
                &self.publisher,
                &headers,
                &event_types,
                &event_versions,
                &aggregate_types,
                &aggregate_ids,
                &enqueued_at,
            ],
        )
        .await
        .map(drop)
        .map_err(|e| classify(&e))
    }
}

/// The pool on another database's sink: libpq's TLS parameters, as the
/// outbox database, the connections named `name`. Building it connects
/// nowhere.
fn sink_pool(url: &str, name: &str) -> Result<Pool> {
    let bad = |e: Error| match e {
        Error::Config { message, source } => Error::Publisher {
            message: format!("bad postgres sink URL: {message}"),
            source,
        },
        other => other,
    };
    let target = crate::connect::target(url).map_err(bad)?.named(name);
    crate::pool_for(target, SINK_CONNECTIONS).map_err(bad)
}

impl Publisher for PostgresPublisher {
    const NAME: &'static str = "postgres";
    // One INSERT for the whole batch: all of it or none.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Atomic;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        match self.insert(batch).await {
            Ok(()) => vec![Ok(()); batch.len()],
            // A permanent error in a multi-row insert may come from one bad
            // row; insert one by one so only that row pays for it.
            Err(e) if !e.is_retryable() && batch.len() > 1 => {
                let mut outcomes = Vec::with_capacity(batch.len());
                for m in batch {
                    outcomes.push(self.insert(std::slice::from_ref(m)).await);
                }
                outcomes
            }
            Err(e) => all_failed(batch.len(), e),
        }
    }

    async fn check(&self) -> Result<(), PublishError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| classify(&e))
    }
}

/// One row of a sink table, as a consumer reads it. The envelope columns
/// are `None` on rows published before the sink had them.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedEvent {
    /// The sink row's id (increasing in publish order).
    pub id: i64,
    /// The message's `event_id`.
    pub event_id: Uuid,
    /// The message's topic.
    pub topic: String,
    /// The payload, its JSON text as stored (any number, any depth).
    pub payload: crate::Payload,
    /// The headers, as a JSON object.
    pub headers: serde_json::Value,
    /// The outbox message's id.
    pub message_id: i64,
    /// The event type.
    pub event_type: Option<String>,
    /// The event version.
    pub event_version: Option<i32>,
    /// The aggregate type.
    pub aggregate_type: Option<String>,
    /// The aggregate id.
    pub aggregate_id: Option<String>,
    /// When the producer enqueued the message.
    pub enqueued_at: Option<DateTime<Utc>>,
    /// When the relay published it.
    pub created_at: DateTime<Utc>,
    /// The publisher column (the relay id).
    pub publisher: String,
}

/// Up to 1,000 rows of `schema`'s sink after row id `after` (exclusive),
/// in id order: how a consumer of the sink reads it.
pub async fn published_after(
    client: &tokio_postgres::Client,
    schema: &Schema,
    after: i64,
) -> Result<Vec<PublishedEvent>> {
    let rows =
        crate::store::conn::query(client, &SinkQueries::new(schema).read_after, &[&after]).await?;
    use crate::store::decode::get;
    rows.iter()
        .map(|r| {
            Ok(PublishedEvent {
                id: get(r, "id")?,
                event_id: get(r, "event_id")?,
                topic: get(r, "topic")?,
                payload: get(r, "payload")?,
                headers: get(r, "headers")?,
                message_id: get(r, "message_id")?,
                event_type: get(r, "event_type")?,
                event_version: get(r, "event_version")?,
                aggregate_type: get(r, "aggregate_type")?,
                aggregate_id: get(r, "aggregate_id")?,
                enqueued_at: get(r, "enqueued_at")?,
                created_at: get(r, "created_at")?,
                publisher: get(r, "publisher")?,
            })
        })
        .collect()
}

/// How many times message `message_id` was written to `schema`'s sink.
pub async fn published_count(
    client: &tokio_postgres::Client,
    schema: &Schema,
    message_id: i64,
) -> Result<i64> {
    let q = SinkQueries::new(schema).count_for_message;
    let rows = crate::store::conn::query(client, &q, &[&message_id]).await?;
    match rows.first() {
        Some(r) => crate::store::decode::get(r, "count"),
        None => Ok(0),
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> PublishError {
    PublishError::retryable(format!(
        "sink database unreachable: {}",
        crate::error_chain(&e)
    ))
}

/// Classifies by SQLSTATE class: data (22), integrity (23) and syntax or
/// access (42) errors are permanent; connection (08), operator intervention
/// (57), transaction rollback (40), resources (53) and anything without a
/// code (I/O, closed connection) are retryable.
pub fn classify(e: &tokio_postgres::Error) -> PublishError {
    let text = match e.as_db_error() {
        Some(db) => format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => e.to_string(),
    };
    match e.code().map(|c| c.code()) {
        Some(code)
            if ["22", "23", "42"]
                .iter()
                .any(|class| code.starts_with(class)) =>
        {
            PublishError::permanent(text)
        }
        _ => PublishError::retryable(text),
    }
}

/// This publisher, as it declares itself (see `kit/declare.rs`):
/// `postgres` alone is the outbox database; a URL names another one.
const DECLARATION: Declaration = Declaration {
    name: "postgres",
    schemes: &["postgres", "postgresql"],
    not_served: &[],
    settings: &[],
    summary: "the `published_events` table, in the outbox database or another",
    options: &[],
};

impl Declared for PostgresPublisher {
    const DECLARATION: Declaration = DECLARATION;

    async fn build(url: &str, ctx: &PublisherContext) -> Result<Self> {
        Self::from_url(url, ctx).await
    }

    fn check(url: &str) -> Result<()> {
        Self::check_url(url)
    }
}
