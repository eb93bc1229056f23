//! The statements the library runs for applications (enqueue, inbox), one
//! `.sql` file each in `queries/` (the header documents parameters and
//! result columns), rendered once per schema. The relay's statements are in
//! the `outbox-relay` crate (`src/store/sql/`), next to the code that runs
//! them.

crate::statements! {
    /// The library's statements for one schema.
    pub(crate) struct Queries {
        enqueue_one = include_str!("queries/enqueue_one.sql"),
        enqueue_many = include_str!("queries/enqueue_many.sql"),
        inbox_record = include_str!("queries/inbox_record.sql"),
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
