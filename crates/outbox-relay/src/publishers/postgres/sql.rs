//! The postgres publisher's statements on its sink table
//! (`<schema>.published_events`), one `.sql` file each in `sql/` (the
//! header documents parameters and result columns), rendered once per
//! schema.

outbox::statements! {
    /// The sink's statements for one schema.
    pub(crate) struct SinkQueries {
        insert = include_str!("sql/insert.sql"),
        ready = include_str!("sql/ready.sql"),
        create = include_str!("sql/create.sql"),
        count_for_message = include_str!("sql/count_for_message.sql"),
        read_after = include_str!("sql/read_after.sql"),
    }
}

#[cfg(test)]
mod tests {
    use super::SinkQueries;
    use outbox_testkit::sql_snapshot::{check_snapshot, SCHEMA};

    #[test]
    fn sink_statements_are_as_rendered() {
        let q = SinkQueries::new(&outbox::Schema::new(SCHEMA).unwrap());
        check_snapshot(
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/publishers/postgres/rendered.txt"),
            &q.named(),
        );
    }
}
