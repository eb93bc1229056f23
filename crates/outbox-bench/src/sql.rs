//! Every statement of `outbox bench`, in one place: the backlog preload, and the three reference
//! algorithms the relay is measured against, on a table shaped exactly like
//! the seed lab's (`status` updated in place, index `(status, next_run_at, id)`).

use outbox::sql::render;
use outbox::Schema;

/// Bench statements for one (throwaway) schema.
#[derive(Debug, Clone)]
pub struct BenchQueries {
    /// Preloads `$1 int8` pending messages into `<schema>.messages`.
    pub preload_outbox: String,
    /// Preloads `$1 int8` pending messages numbered after `$2 int8` (for a
    /// backlog loaded in slices).
    pub preload_outbox_from: String,
    /// Preloads `$1 int8` pending messages over `$2 int8` aggregates, dealt
    /// round-robin (message g belongs to aggregate `g mod $2`): consecutive
    /// ids belong to different aggregates, as under many producers, and
    /// each aggregate's messages are `$2` ids apart.
    pub preload_outbox_spread: String,
    /// `(heap_bytes, index_bytes, dead_tuples)` (all `int8`) of
    /// `<schema>.messages`.
    pub hot_table_health: String,
    /// `pg_total_relation_size` of `<schema>.messages` (heap, TOAST and
    /// every index): `bytes int8`.
    pub hot_table_total_bytes: String,
    /// The database's clock now (`clock_timestamp()`): what `sent_at` is
    /// compared against when timing a relay process: `now timestamptz`.
    pub clock_now: String,
    /// The latest `sent_at` in `messages_sent`: `last_sent_at timestamptz`
    /// (null when none is sent).
    pub last_sent_at: String,
    /// One hand-written enqueue, as an application would write it without
    /// the library: `$1 event_type, $2 aggregate_type, $3 aggregate_id,
    /// $4 topic, $5 jsonb payload`.
    pub hand_insert: String,
    /// Rows in `<schema>.messages`: `count int8`.
    pub outbox_rows: String,
    /// Turns the NOTIFY trigger off (`produce` without NOTIFY).
    pub notify_off: String,
    /// Creates the seed-shaped table and its index.
    pub seed_create: String,
    /// Preloads `$1 int8` pending rows into the seed-shaped table.
    pub seed_preload: String,
    /// Seed claim: `$1 int8 limit, $2 relay id` → `(id, topic, payload)`.
    pub seed_claim: String,
    /// Seed publish (one message): `$1 int8 id, $2 topic, $3 jsonb, $4 publisher`.
    pub seed_publish_one: String,
    /// Seed mark sent (one message): `$1 int8 id, $2 relay id`.
    pub seed_mark_sent_one: String,
    /// Naive batch: claim, insert into the sink and UPDATE status in one
    /// statement: `$1 int8 limit, $2 relay id` → rows.
    pub naive_update_batch: String,
    /// The DELETE limit: claim, insert into the sink and DELETE in one
    /// statement: `$1 int8 limit, $2 publisher` → rows.
    pub delete_batch: String,
    /// The id of the first outbox message not yet settled at or after
    /// `$1 int8` (no row once the relay is done), read from the claimable
    /// index.
    pub first_unsettled: String,
    /// Number of outbox messages that are claimable or claimed: `count int8`.
    pub unsettled: String,
    /// Messages whose state (`all_messages`) is not `sent`: `count int8`.
    pub not_sent_anywhere: String,
    /// Rows of the seed-shaped table not yet sent: `count int8`.
    pub seed_unsent: String,
    /// Distinct messages in the sink: `count int8`.
    pub published_distinct: String,
    /// Rows in `messages_sent`: `count int8`.
    pub sent_count: String,
    /// `(event_id, sent_at)` of every sent row.
    pub sent_times: String,
    /// Refreshes statistics after a preload.
    pub vacuum_messages: String,
    /// Refreshes statistics after a seed-table preload.
    pub vacuum_seed: String,
    /// Writes out every dirty page before a timed run.
    pub checkpoint: String,
    /// Drops the throwaway schema.
    pub drop_schema: String,
}

impl BenchQueries {
    /// Renders the statements for `schema`.
    pub fn new(schema: &Schema) -> Self {
        let r = |t: &str| render(t, schema);
        Self {
            preload_outbox: r("INSERT INTO {schema}.messages \
                 (event_type, aggregate_type, aggregate_id, topic, payload) \
                 SELECT 'bench.event', 'bench', g::text, 'bench', \
                        jsonb_build_object('i', g, 'pad', repeat('x', 100)) \
                   FROM generate_series(1, $1::int8) g"),
            preload_outbox_from: r("INSERT INTO {schema}.messages \
                 (event_type, aggregate_type, aggregate_id, topic, payload) \
                 SELECT 'bench.event', 'bench', g::text, 'bench', \
                        jsonb_build_object('i', g, 'pad', repeat('x', 100)) \
                   FROM generate_series($2::int8 + 1, $2::int8 + $1::int8) g"),
            preload_outbox_spread: r("INSERT INTO {schema}.messages \
                 (event_type, aggregate_type, aggregate_id, topic, payload) \
                 SELECT 'bench.event', 'bench', (g % $2::int8)::text, 'bench', \
                        jsonb_build_object('i', g, 'pad', repeat('x', 100)) \
                   FROM generate_series(1, $1::int8) g"),
            hot_table_total_bytes: r("SELECT pg_total_relation_size('{schema}.messages') AS bytes"),
            clock_now: "SELECT clock_timestamp() AS now".to_owned(),
            last_sent_at: r("SELECT max(sent_at) AS last_sent_at FROM {schema}.messages_sent"),
            hot_table_health: r("SELECT pg_relation_size('{schema}.messages') AS heap_bytes, \
                        pg_indexes_size('{schema}.messages') AS index_bytes, \
                        pg_stat_get_dead_tuples('{schema}.messages'::regclass) AS dead_tuples"),
            hand_insert: r("INSERT INTO {schema}.messages \
                 (event_type, aggregate_type, aggregate_id, topic, payload) \
                 VALUES ($1, $2, $3, $4, $5)"),
            outbox_rows: r("SELECT count(*) AS count FROM {schema}.messages"),
            notify_off: r("ALTER TABLE {schema}.messages DISABLE TRIGGER messages_notify_relay"),
            seed_create: r("CREATE TABLE {schema}.seed_messages ( \
                   id BIGSERIAL PRIMARY KEY, aggregate_type TEXT NOT NULL, aggregate_id BIGINT NOT NULL, \
                   topic TEXT NOT NULL, payload JSONB NOT NULL, \
                   status TEXT NOT NULL CHECK (status IN ('pending','processing','sent','failed')), \
                   attempts INT NOT NULL DEFAULT 0, next_run_at TIMESTAMPTZ NOT NULL DEFAULT now(), \
                   locked_by TEXT, locked_at TIMESTAMPTZ, last_error TEXT, \
                   created_at TIMESTAMPTZ NOT NULL DEFAULT now(), sent_at TIMESTAMPTZ); \
                 CREATE INDEX ON {schema}.seed_messages (status, next_run_at, id)"),
            seed_preload: r("INSERT INTO {schema}.seed_messages \
                 (aggregate_type, aggregate_id, topic, payload, status) \
                 SELECT 'bench', g, 'bench', jsonb_build_object('i', g, 'pad', repeat('x', 100)), 'pending' \
                   FROM generate_series(1, $1::int8) g"),
            seed_claim: r("WITH c AS ( \
                   SELECT id FROM {schema}.seed_messages \
                    WHERE status IN ('pending', 'failed') AND next_run_at <= now() \
                    ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) \
                 UPDATE {schema}.seed_messages m \
                    SET status = 'processing', attempts = attempts + 1, locked_by = $2, locked_at = now() \
                   FROM c WHERE m.id = c.id RETURNING m.id, m.topic, m.payload"),
            seed_publish_one: r("INSERT INTO {schema}.published_events \
                 (message_id, event_id, topic, payload, publisher) \
                 VALUES ($1, gen_random_uuid(), $2, $3, $4)"),
            seed_mark_sent_one: r("UPDATE {schema}.seed_messages \
                    SET status = 'sent', sent_at = now(), locked_by = NULL, locked_at = NULL \
                  WHERE id = $1 AND status = 'processing' AND locked_by = $2"),
            naive_update_batch: r("WITH c AS ( \
                   SELECT id, topic, payload FROM {schema}.seed_messages \
                    WHERE status IN ('pending', 'failed') AND next_run_at <= now() \
                    ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED), \
                 ins AS ( \
                   INSERT INTO {schema}.published_events (message_id, event_id, topic, payload, publisher) \
                   SELECT id, gen_random_uuid(), topic, payload, $2 FROM c) \
                 UPDATE {schema}.seed_messages m \
                    SET status = 'sent', attempts = attempts + 1, sent_at = now() \
                   FROM c WHERE m.id = c.id"),
            delete_batch: r("WITH c AS ( \
                   DELETE FROM {schema}.seed_messages \
                    WHERE id IN (SELECT id FROM {schema}.seed_messages \
                                  WHERE status IN ('pending', 'failed') AND next_run_at <= now() \
                                  ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) \
                   RETURNING id, topic, payload) \
                 INSERT INTO {schema}.published_events (message_id, event_id, topic, payload, publisher) \
                 SELECT id, gen_random_uuid(), topic, payload, $2 FROM c"),
            unsettled: r("SELECT count(*) AS count FROM {schema}.messages \
                  WHERE status IN ('pending', 'failed', 'processing')"),
            first_unsettled: r("SELECT id FROM {schema}.messages \
                  WHERE id >= $1 AND dead_at IS NULL AND status IN ('pending', 'failed', 'processing') \
                  ORDER BY id LIMIT 1"),
            not_sent_anywhere: r("SELECT count(*) AS count FROM {schema}.all_messages WHERE status <> 'sent'"),
            seed_unsent: r("SELECT count(*) AS count FROM {schema}.seed_messages WHERE status <> 'sent'"),
            published_distinct: r("SELECT count(DISTINCT message_id) AS count FROM {schema}.published_events"),
            sent_count: r("SELECT count(*) AS count FROM {schema}.messages_sent"),
            sent_times: r("SELECT event_id, sent_at FROM {schema}.messages_sent"),
            vacuum_messages: r("VACUUM ANALYZE {schema}.messages"),
            vacuum_seed: r("VACUUM ANALYZE {schema}.seed_messages"),
            checkpoint: "CHECKPOINT".to_owned(),
            drop_schema: r("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_quoted_schema_and_no_token_is_left() {
        let q = BenchQueries::new(&Schema::new("bench_x").unwrap());
        for sql in [
            &q.preload_outbox,
            &q.seed_create,
            &q.delete_batch,
            &q.drop_schema,
        ] {
            assert!(sql.contains("\"bench_x\""), "{sql}");
            assert!(!sql.contains("{schema}"), "{sql}");
        }
    }
}
