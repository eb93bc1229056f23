//! The operator page's snapshot statements (`outbox ui`). One snapshot is
//! computed per interval for every viewer, so these run at most once per
//! interval whatever the number of open pages.

outbox::statements! {
    /// Statements of the operator page, for one schema.
    pub(crate) struct UiQueries {
        /// → `(topic, status, relay text or NULL, count int8, last_claim
        /// timestamptz or NULL)`: the hot table in one pass, by topic and
        /// status, with the rows in flight also by the relay that holds them.
        /// The hot table holds only unsent rows (sent ones move to
        /// `messages_sent`) and no index names `status` (migration 5), so this
        /// is the same single pass as the relay's own backlog gauge.
        hot_counts = "SELECT topic, status, \
                    CASE WHEN status = 'processing' THEN locked_by END AS relay, \
                    count(*) AS count, max(locked_at) AS last_claim \
               FROM {schema}.messages GROUP BY 1, 2, 3",
        /// → `(sent_inserted int8 or NULL, sent_estimate int8)`: rows ever
        /// inserted into `messages_sent` (the statistics collector's counter,
        /// for the throughput chart: two samples' difference is what was sent
        /// between them) and the collector's count of its live rows (the
        /// planner's estimate before the collector has one). Neither reads the
        /// table, which holds every sent message not yet archived.
        sent_counters = "SELECT s.n_tup_ins AS sent_inserted, \
                    coalesce(s.n_live_tup, greatest(c.reltuples, 0)::int8) AS sent_estimate \
               FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
              WHERE c.oid = to_regclass('{schema}.messages_sent')",
        /// → `(relay_id, ordering, lease_until, started_at)` of the relays
        /// registered for ordering per aggregate.
        relays = "SELECT relay_id, ordering, lease_until, started_at \
               FROM {schema}.relays ORDER BY relay_id",
        /// `$1 int8 limit` → `(id, message_id, replayed_at, replayed_by,
        /// dead_reason)` of the newest replays.
        recent_replays = "SELECT id, message_id, replayed_at, replayed_by, dead_reason \
               FROM {schema}.dead_replays ORDER BY id DESC LIMIT $1",
    }
}
