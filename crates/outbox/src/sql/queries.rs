//! The statements the library runs for applications (enqueue, inbox),
//! rendered once per schema. The relay's statements are in the
//! `outbox-relay` crate (`src/store/sql/`), next to the code that runs them.

crate::statements! {
    /// The library's statements for one schema.
    pub(crate) struct Queries {
        /// Enqueue one message. `$1 uuid event_id, $2 event_type, $3 int4 version,
        /// $4 aggregate_type, $5 aggregate_id, $6 topic, $7 jsonb payload, $8 jsonb headers`
        /// → `id`.
        enqueue_one = "INSERT INTO {schema}.messages \
             (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        /// Enqueue many in one round trip: the same eight parameters as arrays
        /// → `(id, event_id)` per row.
        enqueue_many = "INSERT INTO {schema}.messages \
             (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers) \
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::text[], \
                                  $6::text[], $7::jsonb[], $8::jsonb[]) \
             RETURNING id, event_id",
        /// Inbox: `$1 event_id text, $2 topic` → rows affected (1 first time, 0 duplicate).
        inbox_record = "INSERT INTO {schema}.processed_events (event_id, topic) VALUES ($1, $2) \
             ON CONFLICT (event_id) DO NOTHING",
    }
}

#[cfg(test)]
mod tests {
    use super::Queries;
    use outbox_testkit::sql_snapshot::{check_snapshot, SCHEMA};

    /// The statements parse as they did when they were Rust literals
    /// (`rendered.txt`; see `outbox_testkit::sql_snapshot`).
    #[test]
    fn statements_are_as_rendered() {
        let q = Queries::new(&crate::Schema::new(SCHEMA).unwrap());
        check_snapshot(
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/sql/rendered.txt"),
            &q.named(),
        );
    }
}
