//! Dead-letter statements: list, show, replay, purge.

/// Columns of a dead-letter row, read by name (`DeadQueries::list`,
/// `DeadQueries::get`).
pub(crate) const DEAD_COLUMNS: &str = "id, event_id, event_type, event_version, aggregate_type, \
     aggregate_id, topic, payload, headers, status, attempts, next_run_at, last_error, \
     dead_at, dead_reason, created_at";

outbox::statements! {
    /// Statements over dead messages, for one schema.
    pub(crate) struct DeadQueries {
        /// `$1 text topic (NULL = any), $2 int8 limit` → [`DEAD_COLUMNS`] of dead
        /// rows in id order.
        list = format!(
            "SELECT {DEAD_COLUMNS} FROM {{schema}}.messages \
              WHERE status = 'dead' AND ($1::text IS NULL OR topic = $1) \
              ORDER BY id LIMIT $2"
        ),
        /// `$1 int8 id` → [`DEAD_COLUMNS`] of that message, whatever its status,
        /// from every live table (so "not dead" can be told from "not found").
        get = format!(
            "SELECT {DEAD_COLUMNS} FROM {{schema}}.all_messages WHERE id = $1"
        ),
        /// Replay in one statement: `$1 int8[] ids (NULL = any), $2 text topic
        /// (NULL = any), $3 text replayed_by (NULL = the database user)` → the
        /// replayed ids. Each dead row goes back to `pending` with attempts 0,
        /// due now, dead fields and last error cleared; what it died of is
        /// recorded in `dead_replays` by the same statement.
        // The CTE locks the rows first and keeps their old values for the
        // record; UPDATE ... RETURNING only sees the new ones.
        replay = "WITH target AS ( \
               SELECT id, attempts, dead_at, dead_reason, last_error \
                 FROM {schema}.messages \
                WHERE status = 'dead' \
                  AND ($1::int8[] IS NULL OR id = ANY($1)) \
                  AND ($2::text IS NULL OR topic = $2) \
                  AND {schema}.headers_valid(headers) \
                FOR UPDATE), \
             replayed AS ( \
               UPDATE {schema}.messages m \
                  SET status = 'pending', attempts = 0, next_run_at = now(), \
                      dead_at = NULL, dead_reason = NULL, last_error = NULL, \
                      locked_by = NULL, locked_at = NULL \
                 FROM target t WHERE m.id = t.id \
               RETURNING m.id) \
             INSERT INTO {schema}.dead_replays \
               (message_id, replayed_by, attempts, dead_at, dead_reason, last_error) \
             SELECT t.id, coalesce($3::text, session_user::text), t.attempts, t.dead_at, \
                    t.dead_reason, t.last_error \
               FROM target t JOIN replayed USING (id) \
             RETURNING message_id",
        /// `$1 int8[] ids (NULL = any), $2 text topic (NULL = any)` → `int8`
        /// count of matching dead rows that [`Self::replay`] skips because their
        /// headers break the `messages_headers_valid` rule (migration 6): back
        /// in `pending` they would violate the CHECK, so they stay dead until
        /// an operator fixes them.
        unreplayable = "SELECT count(*) AS count FROM {schema}.messages \
              WHERE status = 'dead' \
                AND ($1::int8[] IS NULL OR id = ANY($1)) \
                AND ($2::text IS NULL OR topic = $2) \
                AND NOT {schema}.headers_valid(headers)",
        /// `$1 int8[] ids` → `(id, status)` of those that exist (live tables).
        status_of = "SELECT id, status FROM {schema}.all_messages WHERE id = ANY($1)",
        /// `$1 float8 seconds` → rows deleted: dead rows whose `dead_at` is older.
        purge = "DELETE FROM {schema}.messages \
              WHERE status = 'dead' \
                AND dead_at < now() - $1::float8 * interval '1 second'",
    }
}
