//! Dead-letter statements: one function per statement.

use super::decode::{get, Lossy, LossyPayload, Timestamp};
use super::Store;
use crate::dead::{DeadRow, UnreadableRow};
use crate::{Payload, Result};
use serde::Serialize;
use std::time::Duration;
use tokio_postgres::Row;
use uuid::Uuid;

/// A message as dead-letter handling shows it (every column that matters
/// to an operator deciding whether to replay it). Read for showing, so
/// whatever a producer could write is held: payload and headers as their
/// stored JSON text (any depth, any number), times as [`Timestamp`]
/// (infinities, years chrono cannot hold), text with bytes that are not
/// UTF-8 replaced. Values are whole; a caller printing them cuts them
/// ([`cut`](super::decode::cut)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadMessage {
    /// Row id.
    pub id: i64,
    /// Deduplication key for consumers.
    pub event_id: Uuid,
    /// What happened.
    pub event_type: String,
    /// Payload schema version.
    pub event_version: i32,
    /// Kind of entity.
    pub aggregate_type: String,
    /// Which entity.
    pub aggregate_id: String,
    /// Stream, subject or routing key.
    pub topic: String,
    /// The event body, as stored.
    pub payload: Payload,
    /// Headers, as stored.
    pub headers: Payload,
    /// `dead` for a dead-letter; the store's read of one message returns
    /// any status, so that [`DeadLetters::show`](crate::DeadLetters::show)
    /// can say what a row that is not dead is.
    pub status: String,
    /// Publication attempts made.
    pub attempts: i32,
    /// When it was (or would be) due.
    pub next_run_at: Timestamp,
    /// The last publication error.
    pub last_error: Option<String>,
    /// When it went dead (none on a row written `dead` by hand).
    pub dead_at: Option<Timestamp>,
    /// Why it went dead.
    pub dead_reason: Option<String>,
    /// When the producer wrote it.
    pub created_at: Timestamp,
}

/// A dead message as a list shows it: no payload, the reason cut to 500
/// characters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadSummary {
    /// Message id.
    pub id: i64,
    /// Stream, subject or routing key.
    pub topic: String,
    /// What happened.
    pub event_type: String,
    /// Publication attempts made.
    pub attempts: i32,
    /// When it went dead.
    pub dead_at: Option<Timestamp>,
    /// Why it went dead (its first 500 characters).
    pub dead_reason: Option<String>,
}

/// Parameters of [`Store::list_dead_messages`].
#[derive(Debug, Clone, Default)]
pub struct DeadListParams<'a> {
    /// Only this topic, if set.
    pub topic: Option<&'a str>,
    /// At most this many rows.
    pub limit: i64,
}

/// Parameters of [`Store::replay_dead_messages`]: which dead rows to send
/// back to `pending`. `None` means "any" for each filter.
#[derive(Debug, Clone, Default)]
pub struct ReplayParams<'a> {
    /// Only these ids.
    pub ids: Option<&'a [i64]>,
    /// Only this topic.
    pub topic: Option<&'a str>,
    /// Recorded in `dead_replays.replayed_by`; the database user if `None`.
    pub replayed_by: Option<&'a str>,
    /// Only rows whose reason, last error, event type, aggregate id or
    /// payload contains this text (case-insensitive).
    pub text: Option<&'a str>,
}

/// Parameters of [`Store::newest_dead_messages`] and
/// [`Store::count_dead_matching`]: `None` means "any" for each filter.
#[derive(Debug, Clone, Default)]
pub struct DeadFilterParams<'a> {
    /// Only this topic.
    pub topic: Option<&'a str>,
    /// Only rows whose reason, last error, event type, aggregate id or
    /// payload contains this text (case-insensitive).
    pub text: Option<&'a str>,
}

impl Store {
    /// Dead messages in id order (see `sql/dead/list.sql` for what counts
    /// as dead); a row that cannot be read is an [`UnreadableRow`] in its
    /// place.
    pub(crate) async fn list_dead_messages(&self, p: DeadListParams<'_>) -> Result<Vec<DeadRow>> {
        let client = self.client().await?;
        let rows = client
            .query(&self.q().dead.list, &[&p.topic, &p.limit])
            .await?;
        rows.iter()
            .map(|r| {
                let id: i64 = get(r, "id")?;
                Ok(dead_from_row(r).map_err(|e| unreadable(id, e)))
            })
            .collect()
    }

    /// Dead messages matching `p`, the newest death first, at most `limit`.
    pub(crate) async fn newest_dead_messages(
        &self,
        p: DeadFilterParams<'_>,
        limit: i64,
    ) -> Result<Vec<DeadSummary>> {
        let client = self.client().await?;
        let rows = client
            .query(&self.q().dead.newest, &[&p.topic, &p.text, &limit])
            .await?;
        rows.iter()
            .map(|r| {
                Ok(DeadSummary {
                    id: get(r, "id")?,
                    topic: get::<Lossy>(r, "topic")?.0,
                    event_type: get::<Lossy>(r, "event_type")?.0,
                    attempts: get(r, "attempts")?,
                    dead_at: get(r, "dead_at")?,
                    dead_reason: get::<Option<Lossy>>(r, "dead_reason")?.map(|l| l.0),
                })
            })
            .collect()
    }

    /// How many dead messages match `p`.
    pub(crate) async fn count_dead_matching(&self, p: DeadFilterParams<'_>) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(&self.q().dead.count_matching, &[&p.topic, &p.text])
            .await?;
        get(&row, "count")
    }

    /// The message `id`, whatever its status, if it is in a live table.
    pub(crate) async fn get_dead_message(&self, id: i64) -> Result<Option<DeadMessage>> {
        let client = self.client().await?;
        let row = client.query_opt(&self.q().dead.get, &[&id]).await?;
        row.as_ref().map(dead_from_row).transpose()
    }

    /// Sends matching dead rows back to `pending` and records each replay,
    /// in one statement, on `client` (so a caller can wrap it in its own
    /// transaction). Returns the replayed ids, sorted.
    pub(crate) async fn replay_dead_messages(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
        p: ReplayParams<'_>,
    ) -> Result<Vec<i64>> {
        let rows = super::conn::query(
            client,
            &self.q().dead.replay,
            &[&p.ids, &p.topic, &p.replayed_by, &p.text],
        )
        .await?;
        let mut ids = rows
            .iter()
            .map(|r| get(r, "message_id"))
            .collect::<Result<Vec<i64>>>()?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// How many dead rows matching `p` a replay skips because their headers
    /// break the schema's rule (`p.replayed_by` is ignored).
    pub(crate) async fn count_unreplayable(&self, p: ReplayParams<'_>) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(&self.q().dead.unreplayable, &[&p.ids, &p.topic, &p.text])
            .await?;
        get(&row, "count")
    }

    /// `(id, status)` of those of `ids` still in a live table.
    pub(crate) async fn message_statuses(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>> {
        let rows = super::conn::query(client, &self.q().dead.status_of, &[&ids]).await?;
        rows.iter()
            .map(|r| Ok((get(r, "id")?, get::<Lossy>(r, "status")?.0)))
            .collect()
    }

    /// Deletes dead rows that died more than `older_than` ago; returns how many.
    pub(crate) async fn purge_dead_messages(&self, older_than: Duration) -> Result<u64> {
        let client = self.client().await?;
        client
            .execute(&self.q().dead.purge, &[&older_than.as_secs_f64()])
            .await
    }
}

fn dead_from_row(r: &Row) -> Result<DeadMessage> {
    let text = |column| get::<Lossy>(r, column).map(|l| l.0);
    let opt_text = |column| get::<Option<Lossy>>(r, column).map(|l| l.map(|l| l.0));
    Ok(DeadMessage {
        id: get(r, "id")?,
        event_id: get(r, "event_id")?,
        event_type: text("event_type")?,
        event_version: get(r, "event_version")?,
        aggregate_type: text("aggregate_type")?,
        aggregate_id: text("aggregate_id")?,
        topic: text("topic")?,
        payload: get::<LossyPayload>(r, "payload")?.0,
        headers: get::<LossyPayload>(r, "headers")?.0,
        status: text("status")?,
        attempts: get(r, "attempts")?,
        next_run_at: get(r, "next_run_at")?,
        last_error: opt_text("last_error")?,
        dead_at: get(r, "dead_at")?,
        dead_reason: opt_text("dead_reason")?,
        created_at: get(r, "created_at")?,
    })
}

/// `e`, a failed read of row `id`, as the list shows it.
fn unreadable(id: i64, e: crate::Error) -> UnreadableRow {
    match e {
        crate::Error::Decode { column, reason } => UnreadableRow { id, column, reason },
        other => UnreadableRow {
            id,
            column: String::new(),
            reason: crate::error_chain(&other),
        },
    }
}
