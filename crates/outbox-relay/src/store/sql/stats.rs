//! Observability statements: the backlog gauges the relay refreshes on an
//! interval, and the full breakdown `outbox stats` prints on demand.

outbox::statements! {
    /// Statements for metrics and `outbox stats`, for one schema.
    pub(crate) struct StatsQueries {
        /// → `(pending, processing, failed, dead)` counts of the hot table, run
        /// every few seconds by every relay. The hot table holds only unsent
        /// rows (sent ones move to `messages_sent`); no index names `status`
        /// (migration 5 keeps claims HOT), so the live rows are counted in one
        /// pass over the table, and the rows with a `dead_at` from the dead
        /// index. Each row counts under its `status`: one written `dead` by hand
        /// without a `dead_at` is dead (seen in the pass), one left `pending` or
        /// `failed` with a `dead_at` is still waiting (seen in the index), so
        /// no row the relay would never write goes uncounted.
        backlog = "SELECT h.pending + d.pending AS pending, \
                h.processing + d.processing AS processing, \
                h.failed + d.failed AS failed, h.dead + d.dead AS dead \
           FROM (SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                        count(*) FILTER (WHERE status = 'processing') AS processing, \
                        count(*) FILTER (WHERE status = 'failed') AS failed, \
                        count(*) FILTER (WHERE status = 'dead') AS dead \
                   FROM {schema}.messages WHERE dead_at IS NULL) h, \
                (SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                        count(*) FILTER (WHERE status = 'processing') AS processing, \
                        count(*) FILTER (WHERE status = 'failed') AS failed, \
                        count(*) FILTER (WHERE status NOT IN ('pending', 'processing', 'failed')) \
                          AS dead \
                   FROM {schema}.messages WHERE dead_at IS NOT NULL) d",
        /// `$1 text topic or NULL` → `(topic, status, count)` over the hot
        /// table, `messages_sent` and `archived_messages` (status `archived_sent`
        /// / `archived_dead`). A full count, for `outbox stats` only.
        by_topic = "SELECT topic, status, count(*) AS count FROM {schema}.messages \
          WHERE $1::text IS NULL OR topic = $1 GROUP BY topic, status \
         UNION ALL \
         SELECT topic, 'sent', count(*) FROM {schema}.messages_sent \
          WHERE $1::text IS NULL OR topic = $1 GROUP BY topic \
         UNION ALL \
         SELECT topic, 'archived_' || status, count(*) FROM {schema}.archived_messages \
          WHERE $1::text IS NULL OR topic = $1 GROUP BY topic, status",
        /// `$1 text topic or NULL` → `id` and age in seconds of the oldest
        /// message waiting to be published (pending or failed), or no row. The
        /// two epochs are subtracted, not the times: PostgreSQL 15 refuses
        /// `now() - 'infinity'`, and a producer may write that `created_at`
        /// (the age is then infinite, negative or not, never an error).
        // By id on the claimable index: the first match is the oldest
        // (ids and created_at grow together), so no scan of the backlog.
        oldest_pending_age = "SELECT id, (extract(epoch FROM now()) - extract(epoch FROM created_at))::float8 AS age_seconds \
           FROM {schema}.messages \
          WHERE status IN ('pending', 'failed') AND dead_at IS NULL \
            AND ($1::text IS NULL OR topic = $1) \
          ORDER BY id LIMIT 1",
        /// `$1 text topic or NULL` → `id` and age in seconds of the oldest row
        /// left `pending` or `failed` with a `dead_at` (written by hand, or before
        /// a CHECK refused it): never claimed, and missed by
        /// [`Self::oldest_pending_age`], which reads the claimable index. From
        /// the dead index, whose rows are few.
        oldest_pending_with_dead_at = "SELECT id, (extract(epoch FROM now()) - extract(epoch FROM created_at))::float8 AS age_seconds \
           FROM {schema}.messages \
          WHERE dead_at IS NOT NULL AND status IN ('pending', 'failed') \
            AND ($1::text IS NULL OR topic = $1) \
          ORDER BY id LIMIT 1",
        /// `SELECT 1`: the readiness probe's round trip.
        ping = "SELECT 1",
    }
}
