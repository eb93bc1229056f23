/// Errors of the relay engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database returned an error or the connection failed (the
    /// driver's error is the source).
    #[error("database error")]
    Database(#[source] tokio_postgres::Error),
    /// A database call passed its deadline (see [`crate::store::Store::with_deadline`]):
    /// the connection was dropped, and the next call opens a new one.
    #[error("the database did not answer within {0:?}: connection dropped (network partition, or a server that stopped answering)")]
    DatabaseTimeout(std::time::Duration),
    /// A statement answered another number of rows than it must.
    #[error("expected {expected} row, got {got}")]
    RowCount {
        /// `one` or `at most one`.
        expected: &'static str,
        /// Rows returned.
        got: usize,
    },
    /// No connection could be taken from the pool (the pool's error is the
    /// source).
    #[error("cannot connect to the database")]
    Pool(#[source] deadpool_postgres::PoolError),
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
    /// A column of a row holds a value this build cannot read (see
    /// [`crate::store::decode`]); the row alone is affected.
    #[error("column {column}: {reason}")]
    Decode {
        /// The column.
        column: String,
        /// Why, from the driver or the decoder.
        reason: String,
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

impl Error {
    /// Whether trying the same call again may succeed: the connection or
    /// the server failed, not the statement (a database error with a
    /// SQLSTATE of class 08, 53, 57 or 40, or none at all).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::DatabaseTimeout(_) | Self::Pool(_) => true,
            Self::Database(e) => match e.code() {
                None => true,
                Some(code) => {
                    let class = &code.code()[..2];
                    matches!(class, "08" | "53" | "57" | "40")
                        || code == &tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION
                }
            },
            _ => false,
        }
    }
}

impl Error {
    /// Whether the server refused a write because it is read-only
    /// (SQLSTATE 25006: a standby, or in recovery).
    pub fn is_read_only(&self) -> bool {
        match self {
            Self::Database(e) => refuses_writes(e),
            Self::Pool(deadpool_postgres::PoolError::Backend(e)) => refuses_writes(e),
            _ => false,
        }
    }
}

/// SQLSTATE 25006 (`read_only_sql_transaction`): what a standby answers to
/// every write, and to `LISTEN`.
pub(crate) fn refuses_writes(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Self::Pool(e)
    }
}

/// `error` and its chain of causes as one line, `outer: inner: … : root`,
/// each said once: for logs and for the command line, where a bare
/// `Display` would show only the outer layer.
///
/// A link whose text the line already holds is skipped (some libraries
/// print their source inside their own message, as sqlx does), and a
/// tokio-postgres error (bare, or as a pool's backend error) ends the line
/// with the server's message and SQLSTATE: its own text is only
/// "db error", and its source repeats what that description says.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut link = Some(error);
    while let Some(e) = link {
        let pg = match e.downcast_ref::<deadpool_postgres::PoolError>() {
            Some(deadpool_postgres::PoolError::Backend(pg)) => Some(pg),
            _ => e.downcast_ref::<tokio_postgres::Error>(),
        };
        let (text, next) = match pg {
            Some(pg) => (outbox::describe_tokio_postgres(pg), None),
            None => (e.to_string(), e.source()),
        };
        let text = text.trim_end();
        if !text.is_empty() && !line.contains(text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(text);
        }
        link = next;
    }
    line
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Database(e)
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    fn chain(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |inner, t| Some(Layer(t, inner.map(Box::new))))
            .unwrap()
    }

    #[test]
    fn each_layer_once_in_order() {
        let e = chain(&["relay failed", "cannot connect to the database", "refused"]);
        assert_eq!(
            error_chain(&e),
            "relay failed: cannot connect to the database: refused"
        );
    }

    #[test]
    fn a_layer_that_already_printed_its_source_is_not_repeated() {
        let e = chain(&["database error", "returned: no such table", "no such table"]);
        assert_eq!(error_chain(&e), "database error: returned: no such table");
    }

    #[test]
    fn an_anyhow_context_chain_is_walked() {
        let e = anyhow::Error::new(chain(&["root"])).context("outer");
        assert_eq!(error_chain(e.as_ref()), "outer: root");
    }

    #[test]
    fn the_outbox_library_error_chains_its_driver_error() {
        let e = crate::Error::from(outbox::Error::database(chain(&["server said no"])));
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(e.to_string(), "database error");
        assert_eq!(error_chain(&e), "database error: server said no");
    }
}
