//! The schema: its migrations (the numbered files in `sql/migrations/`),
//! the grants of its roles, and [`render`], how a statement on its tables
//! is written for one schema.
//!
//! Statements are plain text with a `{schema}` token, rendered once per
//! validated [`Schema`] ([`render`]); values are always bound parameters.
//! The library's own statements (enqueue, inbox) are private to it, one
//! `.sql` file each in `sql/queries/`; the relay's live in the
//! `outbox-relay` crate (one `.sql` file each, under `src/store/sql/`) and
//! the benchmarks' in `outbox-bench`, each next to the code that runs them.

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

/// The draft migration 12, the insert-only engine (docs/design/
/// insert-only.md), not in [`MIGRATIONS`] yet: for the tests and the bench
/// that run the engine before it is registered. Goes with registering it.
#[doc(hidden)]
pub const INSERT_ONLY_DRAFT: &str = include_str!("next/0012_insert_only.sql");

/// Renders a statement for `schema`: the `{schema}` token becomes the
/// quoted schema name and `{channel}` the schema's notification channel
/// ([`Schema::notify_channel`]), and the statement's header, the `--` lines
/// it starts with (a `.sql` file's documentation), is left out, so that
/// the server's view of a running statement (`pg_stat_activity`, cut at
/// 1 kB) shows its SQL. How every statement of the library is rendered, and
/// how the relay's and the benchmarks' statements on the same tables are
/// rendered too.
pub fn render(template: &str, schema: &Schema) -> String {
    without_header(template)
        .replace("{schema}", &schema.quoted())
        .replace("{channel}", &schema.notify_channel())
}

/// `text` from its first line that is neither blank nor a `--` comment.
fn without_header(text: &str) -> &str {
    let mut rest = text;
    while let Some((line, after)) = rest.split_once('\n') {
        let line = line.trim();
        if !line.is_empty() && !line.starts_with("--") {
            break;
        }
        rest = after;
    }
    rest
}

/// Declares a set of statements rendered once per schema ([`render`]):
/// one line per statement, its name and its text (usually
/// `include_str!` of a `.sql` file whose header documents it), and the
/// struct and its `new(&Schema)` are written once, here. A `with` block
/// nests other sets, each rendered by its own `new`. In tests, `named()`
/// lists every statement with its name (`dead.purge` for a nested one).
///
/// ```
/// outbox::statements! {
///     /// Statements over dead messages.
///     pub(crate) struct DeadQueries {
///         purge = "-- `$1 int8 id` -> rows deleted.\n\
///                  DELETE FROM {schema}.messages WHERE id = $1",
///     }
/// }
/// outbox::statements! {
///     /// Every statement.
///     pub(crate) struct Queries {
///         ping = "SELECT 1",
///     }
///     with {
///         dead: DeadQueries,
///     }
/// }
/// let q = Queries::new(&outbox::Schema::new("billing").unwrap());
/// assert_eq!(q.dead.purge, r#"DELETE FROM "billing".messages WHERE id = $1"#);
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
        $(
            with {
                $(
                    $(#[$part_meta:meta])*
                    $part:ident: $part_ty:ty,
                )*
            }
        )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name {
            $(
                $(#[$field_meta])*
                pub(crate) $field: String,
            )*
            $($(
                $(#[$part_meta])*
                pub(crate) $part: $part_ty,
            )*)?
        }

        impl $name {
            /// Renders every statement for `schema`.
            pub(crate) fn new(schema: &$crate::Schema) -> Self {
                Self {
                    $($field: $crate::sql::render(&$sql, schema),)*
                    $($($part: <$part_ty>::new(schema),)*)?
                }
            }

            /// Applies `f` to the text of every statement, the nested
            /// sets' too.
            #[allow(dead_code)]
            pub(crate) fn for_each_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
                $(f(&mut self.$field);)*
                $($(self.$part.for_each_mut(f);)*)?
            }

            /// Every statement with its name (`part.name` in a nested
            /// set), in declaration order: for tests that check them all.
            /// Only in tests, so that a statement nothing runs is still
            /// dead code to the compiler.
            #[cfg(test)]
            pub(crate) fn named(&self) -> Vec<(String, &str)> {
                #[allow(unused_mut)]
                let mut all: Vec<(String, &str)> =
                    vec![$((stringify!($field).to_owned(), self.$field.as_str()),)*];
                $($(
                    for (name, sql) in self.$part.named() {
                        all.push((format!("{}.{}", stringify!($part), name), sql));
                    }
                )*)?
                all
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_statement_leaves_its_header_out_and_fills_its_tokens() {
        let schema = Schema::new("billing").unwrap();
        let file = "-- What it does.\r\n--\n\n-- Parameters: none.\nLISTEN \"{channel}\"\n-- kept\nSELECT 1 FROM {schema}.t\n";
        assert_eq!(
            render(file, &schema),
            "LISTEN \"outbox_billing\"\n-- kept\nSELECT 1 FROM \"billing\".t\n"
        );
        assert_eq!(render("SELECT 1", &schema), "SELECT 1");
        assert_eq!(render("-- only a comment", &schema), "-- only a comment");
    }
}
