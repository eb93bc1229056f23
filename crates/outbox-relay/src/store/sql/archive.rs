//! Archiving statements: move (or delete) old sent and dead rows in
//! bounded batches, one short statement per batch.

/// The columns shared by `messages`, `messages_sent` and `archived_messages`.
const COLUMNS: &str = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, \
     topic, payload, headers, status, attempts, next_run_at, locked_by, locked_at, last_error, \
     dead_at, dead_reason, created_at, sent_at";

// SKIP LOCKED: two archivers (the relay's and an operator's) split the work
// instead of queueing behind each other. The outer WHERE repeats the
// condition so a row changed meanwhile (a dead row replayed) is re-checked
// on its new version and left alone.

/// One batch of old sent rows.
const SENT: &str = "FROM {schema}.messages_sent \
     WHERE id IN (SELECT id FROM {schema}.messages_sent WHERE sent_at < $1 \
                   LIMIT $2 FOR UPDATE SKIP LOCKED) \
       AND sent_at < $1";

/// One batch of old dead rows.
const DEAD: &str = "FROM {schema}.messages \
     WHERE id IN (SELECT id FROM {schema}.messages \
                   WHERE status = 'dead' AND dead_at < $1 \
                   LIMIT $2 FOR UPDATE SKIP LOCKED) \
       AND status = 'dead' AND dead_at < $1";

/// Moves the rows `from` selects to `archived_messages`.
fn moving(from: &str) -> String {
    format!(
        "WITH moved AS (DELETE {from} RETURNING {COLUMNS}) \
         INSERT INTO {{schema}}.archived_messages ({COLUMNS}) \
         SELECT {COLUMNS} FROM moved"
    )
}

outbox::statements! {
    /// Statements of the archiver, for one schema.
    ///
    /// Every batch statement takes `$1 timestamptz cutoff, $2 int8 batch size`
    /// and returns the number of rows it moved or deleted as rows affected.
    /// The cutoff is fixed once per run ([`Self::cutoff`]) so a run ends even
    /// while new rows keep ageing past it.
    pub(crate) struct ArchiveQueries {
        /// `$1 float8 seconds` → `now() - seconds`, on the database's clock.
        cutoff = "SELECT now() - $1::float8 * interval '1 second' AS cutoff",
        /// `$1 cutoff` → number of sent rows older than it.
        count_sent = "SELECT count(*) AS count FROM {schema}.messages_sent WHERE sent_at < $1",
        /// `$1 cutoff` → number of dead rows older than it.
        count_dead = "SELECT count(*) AS count FROM {schema}.messages \
              WHERE status = 'dead' AND dead_at < $1",
        /// Move one batch of old sent rows to `archived_messages`.
        move_sent = moving(SENT),
        /// Delete one batch of old sent rows.
        delete_sent = format!("DELETE {SENT}"),
        /// Move one batch of old dead rows to `archived_messages`.
        move_dead = moving(DEAD),
        /// Delete one batch of old dead rows.
        delete_dead = format!("DELETE {DEAD}"),
    }
}
