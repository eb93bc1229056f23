//! Archiving statements: move (or delete) old sent and dead rows in
//! bounded batches, one short statement per batch.

use super::render;
use outbox::Schema;

/// The columns shared by `messages`, `messages_sent` and `archived_messages`.
const COLUMNS: &str = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, \
     topic, payload, headers, status, attempts, next_run_at, locked_by, locked_at, last_error, \
     dead_at, dead_reason, created_at, sent_at";

/// Statements of the archiver, for one schema.
///
/// Every batch statement takes `$1 timestamptz cutoff, $2 int8 batch size`
/// and returns the number of rows it moved or deleted as rows affected.
/// The cutoff is fixed once per run ([`Self::cutoff`]) so a run ends even
/// while new rows keep ageing past it.
#[derive(Debug, Clone)]
pub(crate) struct ArchiveQueries {
    /// `$1 float8 seconds` → `now() - seconds`, on the database's clock.
    pub(crate) cutoff: String,
    /// `$1 cutoff` → number of sent rows older than it.
    pub(crate) count_sent: String,
    /// `$1 cutoff` → number of dead rows older than it.
    pub(crate) count_dead: String,
    /// Move one batch of old sent rows to `archived_messages`.
    pub(crate) move_sent: String,
    /// Delete one batch of old sent rows.
    pub(crate) delete_sent: String,
    /// Move one batch of old dead rows to `archived_messages`.
    pub(crate) move_dead: String,
    /// Delete one batch of old dead rows.
    pub(crate) delete_dead: String,
}

impl ArchiveQueries {
    /// Renders the statements for `schema`.
    pub(crate) fn new(schema: &Schema) -> Self {
        let r = |t: &str| render(t, schema);
        // SKIP LOCKED: two archivers (the relay's and an operator's) split
        // the work instead of queueing behind each other. The outer WHERE
        // repeats the condition so a row changed meanwhile (a dead row
        // replayed) is re-checked on its new version and left alone.
        let sent = "FROM {schema}.messages_sent \
             WHERE id IN (SELECT id FROM {schema}.messages_sent WHERE sent_at < $1 \
                           LIMIT $2 FOR UPDATE SKIP LOCKED) \
               AND sent_at < $1";
        let dead = "FROM {schema}.messages \
             WHERE id IN (SELECT id FROM {schema}.messages \
                           WHERE status = 'dead' AND dead_at < $1 \
                           LIMIT $2 FOR UPDATE SKIP LOCKED) \
               AND status = 'dead' AND dead_at < $1";
        let moving = |from: &str| {
            r(&format!(
                "WITH moved AS (DELETE {from} RETURNING {COLUMNS}) \
                 INSERT INTO {{schema}}.archived_messages ({COLUMNS}) \
                 SELECT {COLUMNS} FROM moved"
            ))
        };
        Self {
            cutoff: "SELECT now() - $1::float8 * interval '1 second' AS cutoff".to_owned(),
            count_sent: r(
                "SELECT count(*) AS count FROM {schema}.messages_sent WHERE sent_at < $1",
            ),
            count_dead: r("SELECT count(*) AS count FROM {schema}.messages \
                  WHERE status = 'dead' AND dead_at < $1"),
            move_sent: moving(sent),
            delete_sent: r(&format!("DELETE {sent}")),
            move_dead: moving(dead),
            delete_dead: r(&format!("DELETE {dead}")),
        }
    }
}
