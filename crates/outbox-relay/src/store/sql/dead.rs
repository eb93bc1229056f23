//! Dead-letter statements: list, show, replay, purge.

/// Columns of a dead-letter row, read by name (`DeadQueries::list`,
/// `DeadQueries::get`).
pub(crate) const DEAD_COLUMNS: &str = "id, event_id, event_type, event_version, aggregate_type, \
     aggregate_id, topic, payload, headers, status, attempts, next_run_at, last_error, \
     dead_at, dead_reason, created_at";

/// The operator page's text filter on dead rows, with its parameter
/// number: a case-insensitive substring of the reason, the last error, the
/// event type, the aggregate id or the payload's JSON text. `strpos`, not
/// `LIKE`: what an operator types is never a pattern.
fn text_match(param: u8) -> String {
    format!(
        "(${param}::text IS NULL OR strpos(lower(coalesce(dead_reason, '') || ' ' || \
           coalesce(last_error, '') || ' ' || event_type || ' ' || aggregate_id || ' ' || \
           payload::text), lower(${param})) > 0)"
    )
}

/// Whether a dead row may go back to `pending` as a replay writes it:
/// its headers pass migration 6's rule and its `created_at` migration 10's
/// (the rest of the state is what the replay writes). A row that breaks
/// either stays dead until fixed: back in `pending` it would violate a
/// CHECK and fail the whole replay statement.
const REPLAYABLE: &str = "{schema}.headers_valid(headers) \
     AND {schema}.message_state_problem('pending', NULL, NULL, NULL, 0, now(), created_at) IS NULL";

outbox::statements! {
    /// Statements over dead messages, for one schema.
    pub(crate) struct DeadQueries {
        /// `$1 text topic (NULL = any), $2 int8 limit` → [`DEAD_COLUMNS`] of dead
        /// rows in id order. Dead is `status = 'dead'` or a `dead_at`: the
        /// relay writes both together, but a row written by hand (or before a
        /// CHECK refused it) may hold one without the other, and such a row is
        /// never claimed again (the claim reads `dead_at IS NULL`), so an
        /// operator must see it here.
        list = format!(
            "SELECT {DEAD_COLUMNS} FROM {{schema}}.messages \
              WHERE (status = 'dead' OR dead_at IS NOT NULL) \
                AND ($1::text IS NULL OR topic = $1) \
              ORDER BY id LIMIT $2"
        ),
        /// `$1 int8 id` → [`DEAD_COLUMNS`] of that message, whatever its status,
        /// from every live table (so "not dead" can be told from "not found");
        /// the hot table's row when the id is in both (a row written with an
        /// id the sequence had given out: it goes dead beside the sent one).
        get = format!(
            "SELECT {DEAD_COLUMNS} FROM {{schema}}.all_messages WHERE id = $1 \
              ORDER BY status = 'sent' LIMIT 1"
        ),
        /// `$1 text topic (NULL = any), $2 text filter (NULL = any, see
        /// `text_match`), $3 int8 limit` → `(id, topic, event_type, attempts,
        /// dead_at, dead_reason)` of dead rows, the reason cut to 500
        /// characters, the newest death first: a backward walk of the dead
        /// index, which stops at the limit. No payload: the page lists these
        /// every few seconds, and a payload may be megabytes.
        newest = format!(
            "SELECT id, topic, event_type, attempts, dead_at, \
                    left(dead_reason, 500) AS dead_reason FROM {{schema}}.messages \
              WHERE dead_at IS NOT NULL AND status = 'dead' \
                AND ($1::text IS NULL OR topic = $1) AND {} \
              ORDER BY dead_at DESC LIMIT $3",
            text_match(2)
        ),
        /// `$1 text topic (NULL = any), $2 text filter (NULL = any)` → `int8`
        /// count of matching dead rows (what "replay all matching" would take).
        count_matching = format!(
            "SELECT count(*) AS count FROM {{schema}}.messages \
              WHERE status = 'dead' AND ($1::text IS NULL OR topic = $1) AND {}",
            text_match(2)
        ),
        /// Replay in one statement: `$1 int8[] ids (NULL = any), $2 text topic
        /// (NULL = any), $3 text replayed_by (NULL = the database user), $4 text
        /// filter (NULL = any, see `text_match`)` → the
        /// replayed ids. Each dead row goes back to `pending` with attempts 0,
        /// due now, dead fields and last error cleared; what it died of is
        /// recorded in `dead_replays` by the same statement.
        // The CTE locks the rows first and keeps their old values for the
        // record; UPDATE ... RETURNING only sees the new ones.
        replay = format!(
            "WITH target AS ( \
               SELECT id, attempts, dead_at, dead_reason, last_error \
                 FROM {{schema}}.messages \
                WHERE status = 'dead' \
                  AND ($1::int8[] IS NULL OR id = ANY($1)) \
                  AND ($2::text IS NULL OR topic = $2) AND {} \
                  AND {REPLAYABLE} \
                FOR UPDATE), \
             replayed AS ( \
               UPDATE {{schema}}.messages m \
                  SET status = 'pending', attempts = 0, next_run_at = now(), \
                      dead_at = NULL, dead_reason = NULL, last_error = NULL, \
                      locked_by = NULL, locked_at = NULL \
                 FROM target t WHERE m.id = t.id \
               RETURNING m.id) \
             INSERT INTO {{schema}}.dead_replays \
               (message_id, replayed_by, attempts, dead_at, dead_reason, last_error) \
             SELECT t.id, coalesce($3::text, session_user::text), t.attempts, t.dead_at, \
                    t.dead_reason, t.last_error \
               FROM target t JOIN replayed USING (id) \
             RETURNING message_id",
            text_match(4)
        ),
        /// `$1 int8[] ids (NULL = any), $2 text topic (NULL = any), $3 text
        /// filter (NULL = any)` → `int8` count of matching dead rows that [`Self::replay`] skips
        /// ([`REPLAYABLE`]): back in `pending` they would violate a CHECK, so
        /// they stay dead until an operator fixes them.
        unreplayable = format!(
            "SELECT count(*) AS count FROM {{schema}}.messages \
              WHERE status = 'dead' \
                AND ($1::int8[] IS NULL OR id = ANY($1)) \
                AND ($2::text IS NULL OR topic = $2) AND {} \
                AND NOT ({REPLAYABLE})",
            text_match(3)
        ),
        /// `$1 int8[] ids` → `(id, status)` of those that exist (live tables).
        status_of = "SELECT id, status FROM {schema}.all_messages WHERE id = ANY($1)",
        /// `$1 float8 seconds` → rows deleted: dead rows whose `dead_at` is older.
        purge = "DELETE FROM {schema}.messages \
              WHERE status = 'dead' \
                AND dead_at < now() - $1::float8 * interval '1 second'",
    }
}
