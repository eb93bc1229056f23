//! The schema: its migrations (the numbered files in `sql/migrations/`),
//! the grants of its roles, and [`render`], how a statement on its tables
//! is written for one schema.
//!
//! Statements are plain text with a `{schema}` token, rendered once per
//! validated [`Schema`]; values are always bound parameters. The library's
//! own statements (enqueue, inbox) are private to it; the relay's live in
//! the `outbox-relay` crate and the benchmarks' in `outbox-bench`, each
//! next to the code that runs them.

mod grants;
mod migrations;
mod queries;

pub use grants::grants;
pub use migrations::{
    latest_version, lock_statement, migrate_script, recorded_exists_statement, recorded_statement,
    try_lock_statement, Migration, SchemaVersion, MIGRATIONS,
};
pub(crate) use queries::Queries;

use crate::Schema;

/// Replaces the `{schema}` token with the quoted schema name: how every
/// statement of the library is rendered, and how the relay's and the
/// benchmarks' statements on the same tables are rendered too.
pub fn render(template: &str, schema: &Schema) -> String {
    template.replace("{schema}", &schema.quoted())
}

/// Declares a set of statements rendered once per schema ([`render`]):
/// each statement's doc (parameters and result columns) stands beside its
/// SQL, and the struct and its `new(&Schema)` are written once, here.
///
/// ```
/// outbox::statements! {
///     /// Statements over dead messages.
///     pub(crate) struct DeadQueries {
///         /// `$1 int8 id` → rows deleted.
///         purge = "DELETE FROM {schema}.messages WHERE id = $1",
///     }
/// }
/// let q = DeadQueries::new(&outbox::Schema::new("billing").unwrap());
/// assert_eq!(q.purge, r#"DELETE FROM "billing".messages WHERE id = $1"#);
/// ```
///
/// The SQL may be any expression giving a `&str` or a `String`.
#[doc(hidden)]
#[macro_export]
macro_rules! statements {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident = $sql:expr,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name {
            $(
                $(#[$field_meta])*
                pub(crate) $field: String,
            )*
        }

        impl $name {
            /// Renders every statement for `schema`.
            pub(crate) fn new(schema: &$crate::Schema) -> Self {
                Self {
                    $($field: $crate::sql::render(&$sql, schema),)*
                }
            }
        }
    };
}
