//! The postgres publisher's statements on its sink table
//! (`<schema>.published_events`), rendered once per schema.

outbox::statements! {
    /// The sink's statements for one schema.
    pub(crate) struct SinkQueries {
        /// PostgreSQL sink: `$1 int8[] message ids, $2 uuid[] event ids,
        /// $3 text[] topics, $4 text[] payloads (JSON text), $5 publisher name,
        /// $6 jsonb[] headers, $7 text[] event types, $8 int4[] event versions,
        /// $9 text[] aggregate types, $10 text[] aggregate ids,
        /// $11 timestamptz[] enqueue times` (the messages' `created_at`; the
        /// sink's own `created_at` is the publish time).
        insert = "INSERT INTO {schema}.published_events \
             (message_id, event_id, topic, payload, publisher, headers, \
              event_type, event_version, aggregate_type, aggregate_id, enqueued_at) \
             SELECT m, e, t, p::jsonb, $5, h, et, ev, at, ai, ea \
               FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $6::jsonb[], \
                           $7::text[], $8::int4[], $9::text[], $10::text[], \
                           $11::timestamptz[]) \
                 AS u(m, e, t, p, h, et, ev, at, ai, ea)",
        /// → `ready bool`: whether the sink table exists with every envelope
        /// column, so that [`Self::create`] would change nothing. Checked
        /// first because `create` would fail anyway for a least-privilege role:
        /// PostgreSQL checks the CREATE right of `CREATE SCHEMA IF NOT EXISTS`
        /// and `CREATE TABLE IF NOT EXISTS` before it looks whether the object
        /// exists. `to_regclass` is NULL for a missing schema or table.
        ready = "SELECT count(*) = 6 AS ready FROM pg_attribute \
              WHERE attrelid = to_regclass('{schema}.published_events') \
                AND attname IN ('headers', 'event_type', 'event_version', \
                                'aggregate_type', 'aggregate_id', 'enqueued_at') \
                AND NOT attisdropped",
        /// Creates the sink table where it does not exist (a sink database apart
        /// from the outbox), and adds the envelope columns (`headers`,
        /// `event_type`, `event_version`, `aggregate_type`, `aggregate_id`,
        /// `enqueued_at`) to one made before they existed, as migrations 4 and 8
        /// do in the outbox schema. The ALTER runs only when a column is missing:
        /// it requires owning the table, which a least-privilege relay role does
        /// not.
        create = "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS {schema}.published_events ( \
               id BIGSERIAL PRIMARY KEY, message_id BIGINT NOT NULL, event_id UUID NOT NULL, \
               topic TEXT NOT NULL, payload JSONB NOT NULL, publisher TEXT NOT NULL, \
               created_at TIMESTAMPTZ NOT NULL DEFAULT now(), \
               headers JSONB NOT NULL DEFAULT '{}', \
               event_type TEXT, event_version INT, aggregate_type TEXT, aggregate_id TEXT, \
               enqueued_at TIMESTAMPTZ); \
             DO $sink$ BEGIN \
               IF (SELECT count(*) FROM pg_attribute \
                    WHERE attrelid = '{schema}.published_events'::regclass \
                      AND attname IN ('headers', 'event_type', 'event_version', \
                                      'aggregate_type', 'aggregate_id', 'enqueued_at') \
                      AND NOT attisdropped) < 6 THEN \
                 ALTER TABLE {schema}.published_events \
                   ADD COLUMN IF NOT EXISTS headers JSONB NOT NULL DEFAULT '{}', \
                   ADD COLUMN IF NOT EXISTS event_type TEXT, \
                   ADD COLUMN IF NOT EXISTS event_version INT, \
                   ADD COLUMN IF NOT EXISTS aggregate_type TEXT, \
                   ADD COLUMN IF NOT EXISTS aggregate_id TEXT, \
                   ADD COLUMN IF NOT EXISTS enqueued_at TIMESTAMPTZ; \
               END IF; \
             END $sink$",
        /// Number of sink rows for `$1 int8` message id.
        count_for_message = "SELECT count(*) AS count FROM {schema}.published_events WHERE message_id = $1",
        /// Sink rows in id order after `$1 int8` (exclusive):
        /// `(id, event_id, topic, payload, headers, message_id, event_type,
        /// event_version, aggregate_type, aggregate_id, enqueued_at, created_at,
        /// publisher)`; the envelope columns are NULL on rows published before
        /// the sink had them.
        read_after = "SELECT id, event_id, topic, payload, headers, message_id, \
                    event_type, event_version, aggregate_type, aggregate_id, \
                    enqueued_at, created_at, publisher \
               FROM {schema}.published_events \
              WHERE id > $1 ORDER BY id LIMIT 1000",
    }
}

#[cfg(test)]
mod tests {
    use super::SinkQueries;
    use outbox_testkit::sql_snapshot::{check_snapshot, SCHEMA};

    #[test]
    fn sink_statements_are_as_rendered() {
        let q = SinkQueries::new(&outbox::Schema::new(SCHEMA).unwrap());
        let now: Vec<(String, &str)> = vec![
            ("insert".into(), &q.insert),
            ("ready".into(), &q.ready),
            ("create".into(), &q.create),
            ("count_for_message".into(), &q.count_for_message),
            ("read_after".into(), &q.read_after),
        ];
        check_snapshot(
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/publishers/postgres/rendered.txt"),
            &now,
        );
    }
}
