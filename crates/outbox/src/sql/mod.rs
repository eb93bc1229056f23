//! All SQL of the library and the relay, in one place (the benchmarks'
//! own statements are in the `outbox-bench` crate, `src/sql.rs`).
//!
//! Statements are plain text with a `{schema}` token, rendered once per
//! validated [`Schema`] into a [`Queries`] value; values are always bound
//! parameters. Migrations are the numbered files in `sql/migrations/`.

mod archive;
mod dead;
mod grants;
mod migrations;
mod queries;
mod stats;

pub use archive::ArchiveQueries;
pub use dead::{DeadQueries, DEAD_COLUMNS};
pub use grants::grants;
pub use migrations::{latest_version, migrate_script, Migration, SchemaVersion, MIGRATIONS};
pub use queries::Queries;
pub use stats::StatsQueries;

use crate::Schema;

/// Replaces the `{schema}` token with the quoted schema name: how every
/// statement here is rendered, and how statements kept outside this crate on
/// the same tables (the `outbox-bench` crate's) are rendered too.
pub fn render(template: &str, schema: &Schema) -> String {
    template.replace("{schema}", &schema.quoted())
}
