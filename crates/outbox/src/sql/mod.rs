//! All SQL of the project, in one place.
//!
//! Statements are plain text with a `{schema}` token, rendered once per
//! validated [`Schema`] into a [`Queries`] value; values are always bound
//! parameters. Migrations are the numbered files in `sql/migrations/`.

mod archive;
mod bench;
mod dead;
mod grants;
mod migrations;
mod queries;
mod stats;

pub use archive::ArchiveQueries;
pub use bench::BenchQueries;
pub use dead::{DeadQueries, DEAD_COLUMNS};
pub use grants::grants;
pub use migrations::{latest_version, migrate_script, Migration, SchemaVersion, MIGRATIONS};
pub use queries::Queries;
pub use stats::StatsQueries;

use crate::Schema;

/// Replaces the `{schema}` token with the quoted schema name.
pub(crate) fn render(template: &str, schema: &Schema) -> String {
    template.replace("{schema}", &schema.quoted())
}
