/// Errors of the relay engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database returned an error or the connection failed.
    /// (The driver's error is kept but not chained as a source: the message
    /// already says everything, and chained it would print twice.)
    #[error("database error: {}", outbox::describe_tokio_postgres(.0))]
    Database(tokio_postgres::Error),
    /// No connection could be taken from the pool.
    #[error("cannot connect to the database: {}", describe_pool_error(.0))]
    Pool(deadpool_postgres::PoolError),
    /// The outbox tables are missing in the schema.
    #[error("schema {0} has no outbox tables; run `outbox migrate` (or outbox::migrate) first")]
    NotMigrated(String),
    /// The schema lacks migrations this build needs: an older schema would
    /// make every message fail (missing columns, tables, triggers).
    #[error("schema {schema} at migration {at}, this binary needs {needs}: run `outbox migrate`")]
    SchemaBehind {
        /// The schema.
        schema: String,
        /// Last migration recorded without a gap before it.
        at: i32,
        /// The newest migration this build ships.
        needs: i32,
    },
    /// The schema was migrated by a newer build, whose meaning of its rows
    /// this build may get wrong.
    #[error(
        "schema {schema} at migration {at} is newer than this binary ({knows}): upgrade outbox"
    )]
    SchemaAhead {
        /// The schema.
        schema: String,
        /// The newest migration recorded.
        at: i32,
        /// The newest migration this build ships.
        knows: i32,
    },
    /// A configuration value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Building a publisher failed (bad URL, unknown scheme, ...).
    #[error("publisher: {0}")]
    Publisher(String),
    /// A benchmark or self-check found the outbox in a state it must never be in.
    #[error("check failed: {0}")]
    Check(String),
    /// Dead-letter ids that are not dead messages; nothing was changed.
    #[error("{}", not_dead_list(.0))]
    NotDead(Vec<crate::dead::NotReplayed>),
    /// An error of the `outbox` library (schema name, ...).
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
}

fn not_dead_list(items: &[crate::dead::NotReplayed]) -> String {
    let list: Vec<String> = items.iter().map(ToString::to_string).collect();
    list.join("; ")
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Self::Pool(e)
    }
}

/// One readable line for a pool error: the server's own message when there
/// is one, not deadpool's and tokio-postgres' wrappers around it.
pub fn describe_pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(pg) => outbox::describe_tokio_postgres(pg),
        other => other.to_string(),
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Database(e)
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
