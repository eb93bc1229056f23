/// Errors of the relay engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database returned an error or the connection failed (the
    /// driver's error is the source).
    #[error("database error")]
    Database(#[source] tokio_postgres::Error),
    /// A database call passed its deadline (every call has one: [`RelayConfig::db_timeout`](crate::RelayConfig::db_timeout)):
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
    /// [`crate::admin::get`]); the row alone is affected.
    #[error("column {column}: {reason}")]
    Decode {
        /// The column.
        column: String,
        /// Why, from the driver or the decoder.
        reason: String,
    },
    /// A configuration value is out of range or malformed (built with
    /// [`Error::config`] or, keeping what refused it, [`Error::config_from`]).
    #[error("invalid configuration: {message}")]
    Config {
        /// What is wrong, naming the value.
        message: String,
        /// What refused it (a URL parser, a file that cannot be read, a
        /// TLS library), when something did.
        #[source]
        source: Option<BoxError>,
    },
    /// Building a publisher failed (bad URL, unknown scheme, a client
    /// library that refused its settings, ...); see [`Error::publisher`]
    /// and [`Error::publisher_from`].
    #[error("publisher: {message}")]
    Publisher {
        /// What is wrong.
        message: String,
        /// The client library's error, when it refused.
        #[source]
        source: Option<BoxError>,
    },
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

/// The cause kept in [`Error::Config`] and [`Error::Publisher`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of error an [`Error`] is: for a caller that handles some
/// kinds (a taken `event_id`, a schema to migrate) and reports the rest,
/// without matching on every variant (sqlx's `ErrorKind` is the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An `event_id` given by the caller is already in the outbox
    /// ([`outbox::ErrorKind::DuplicateEvent`]).
    DuplicateEvent,
    /// The schema is not at this build's migration: not migrated, behind
    /// or ahead ([`Error::NotMigrated`], [`Error::SchemaBehind`],
    /// [`Error::SchemaAhead`]).
    SchemaMismatch,
    /// A configuration value, a schema name or an argument was refused
    /// before anything ran.
    Config,
    /// A message refused by the `outbox` library before anything was written.
    InvalidMessage,
    /// The database failed, refused a statement, or could not be reached.
    Database,
    /// The database did not answer in time ([`Error::DatabaseTimeout`]).
    Timeout,
    /// A publisher could not be built ([`Error::Publisher`]).
    Publisher,
    /// A row holds a value this build cannot read ([`Error::Decode`]).
    Decode,
    /// A self-check found the outbox in a state it must never be in.
    Check,
    /// Dead-letter ids that are not dead messages ([`Error::NotDead`]).
    NotDead,
}

impl Error {
    /// [`Error::Config`] with no cause beyond its message.
    pub fn config(message: impl Into<String>) -> Self {
        Self::Config {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Config`] caused by `source` (printed after the message by
    /// [`error_chain`]).
    pub fn config_from(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Config {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::Publisher`] with no cause beyond its message.
    pub fn publisher(message: impl Into<String>) -> Self {
        Self::Publisher {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Publisher`] caused by `source`, the client library's error.
    pub fn publisher_from(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Publisher {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The kind of this error, for a caller to match.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Database(_) | Self::Pool(_) | Self::RowCount { .. } => ErrorKind::Database,
            Self::DatabaseTimeout(_) => ErrorKind::Timeout,
            Self::NotMigrated(_) | Self::SchemaBehind { .. } | Self::SchemaAhead { .. } => {
                ErrorKind::SchemaMismatch
            }
            Self::Decode { .. } => ErrorKind::Decode,
            Self::Config { .. } => ErrorKind::Config,
            Self::Publisher { .. } => ErrorKind::Publisher,
            Self::Check(_) => ErrorKind::Check,
            Self::NotDead(_) => ErrorKind::NotDead,
            Self::Outbox(e) => match e.kind() {
                outbox::ErrorKind::DuplicateEvent => ErrorKind::DuplicateEvent,
                outbox::ErrorKind::InvalidMessage => ErrorKind::InvalidMessage,
                outbox::ErrorKind::InvalidName => ErrorKind::Config,
                // `Database`, and any kind a newer `outbox` adds.
                _ => ErrorKind::Database,
            },
        }
    }

    /// The message of an [`Error::Config`] or [`Error::Publisher`]
    /// followed by its causes (`message: cause: …`), without the
    /// variant's prefix: how the CLI reports one value it refused.
    /// Any other error: its [`error_chain`].
    pub fn detail(&self) -> String {
        match self {
            Self::Config { message, source } | Self::Publisher { message, source } => {
                match source {
                    Some(s) => {
                        let cause = error_chain(s.as_ref());
                        if message.contains(&cause) {
                            message.clone()
                        } else {
                            format!("{message}: {cause}")
                        }
                    }
                    None => message.clone(),
                }
            }
            other => error_chain(other),
        }
    }
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
    fn each_variant_has_its_kind() {
        use crate::Error as E;
        use crate::ErrorKind as K;
        let duplicate = outbox::Error::DuplicateEvent {
            source: Box::new(chain(&["unique violation"])),
        };
        let bad_name = outbox::Schema::new("Bad-Name").unwrap_err();
        let bad_message = outbox::Error::InvalidMessage(outbox::InvalidMessage::EmptyTopic);
        for (e, kind) in [
            (
                E::DatabaseTimeout(std::time::Duration::from_secs(1)),
                K::Timeout,
            ),
            (
                E::RowCount {
                    expected: "one",
                    got: 2,
                },
                K::Database,
            ),
            (E::Pool(deadpool_postgres::PoolError::Closed), K::Database),
            (E::NotMigrated("s".into()), K::SchemaMismatch),
            (
                E::SchemaBehind {
                    schema: "s".into(),
                    at: 1,
                    needs: 2,
                },
                K::SchemaMismatch,
            ),
            (
                E::SchemaAhead {
                    schema: "s".into(),
                    at: 3,
                    knows: 2,
                },
                K::SchemaMismatch,
            ),
            (
                E::Decode {
                    column: "c".into(),
                    reason: "r".into(),
                },
                K::Decode,
            ),
            (E::config("x"), K::Config),
            (E::publisher("x"), K::Publisher),
            (E::Check("x".into()), K::Check),
            (E::NotDead(Vec::new()), K::NotDead),
            (E::from(duplicate), K::DuplicateEvent),
            (E::from(bad_name), K::Config),
            (E::from(bad_message), K::InvalidMessage),
            (
                E::from(outbox::Error::database(chain(&["no"]))),
                K::Database,
            ),
        ] {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }

    /// A Config or Publisher error built from its cause keeps it as the
    /// source: the message says what was refused, the chain why.
    #[test]
    fn config_and_publisher_errors_keep_their_cause() {
        let cause = "No such file or directory";
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, cause);
        for e in [
            crate::Error::config_from("bad URL", io()),
            crate::Error::publisher_from("bad URL", io()),
        ] {
            let source = std::error::Error::source(&e).expect("the cause is the source");
            assert!(source.downcast_ref::<std::io::Error>().is_some(), "{e}");
            assert!(!e.to_string().contains(cause), "{e}");
            assert!(
                error_chain(&e).ends_with(&format!("bad URL: {cause}")),
                "{e}"
            );
            assert_eq!(e.detail(), format!("bad URL: {cause}"));
        }
        let plain = crate::Error::config("limit must be >= 1");
        assert!(std::error::Error::source(&plain).is_none());
        assert_eq!(
            plain.to_string(),
            "invalid configuration: limit must be >= 1"
        );
        assert_eq!(plain.detail(), "limit must be >= 1");
    }

    #[test]
    fn the_outbox_library_error_chains_its_driver_error() {
        let e = crate::Error::from(outbox::Error::database(chain(&["server said no"])));
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(e.to_string(), "database error");
        assert_eq!(error_chain(&e), "database error: server said no");
    }
}
