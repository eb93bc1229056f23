use std::fmt;

/// Everything that can go wrong in the `outbox` library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A schema (or other SQL identifier) name that is not a plain lowercase
    /// identifier. Names are spliced into SQL, so only `[a-z_][a-z0-9_]*`
    /// (at most 63 bytes, not starting with `pg_`) is accepted.
    #[error("invalid schema name {name:?}: {reason}")]
    InvalidIdentifier {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A role name given to [`crate::sql::grants`] that cannot be granted
    /// to: not a plain lowercase identifier (it is spliced into SQL), or a
    /// name PostgreSQL reserves (`public`, `none`, `current_user`,
    /// `session_user`, `current_role`, `pg_*`), where a grant would reach
    /// every role or none.
    #[error("invalid role name {name:?}: {reason}")]
    InvalidRoleName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A message that cannot be enqueued; nothing was written.
    #[error("invalid message: {0}")]
    InvalidMessage(InvalidMessage),
    /// The payload could not be serialized to JSON; nothing was written.
    #[error("payload is not serializable to JSON")]
    Serialize(#[from] serde_json::Error),
    /// An `event_id` given by the caller is already in the outbox (the
    /// live table's `messages_event_id_key`): the INSERT failed, and with it
    /// the caller's transaction. Enqueueing the same event twice is the
    /// usual cause; match on this kind to treat it as done. The driver's
    /// error is the source.
    #[error("event_id already in the outbox")]
    DuplicateEvent {
        /// The driver's error (unique violation on `messages_event_id_key`).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The database returned an error, or the connection failed. The
    /// driver's error is the [`source`](std::error::Error::source): print
    /// the chain (e.g. `{:#}` with anyhow) to see the server's message.
    #[error("database error")]
    Database {
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// Why a [`crate::NewMessage`] was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// `topic` is empty or only whitespace.
    EmptyTopic,
    /// `event_type` is empty or only whitespace.
    EmptyEventType,
    /// `aggregate_type` is empty.
    EmptyAggregateType,
    /// The serialized payload is larger than the configured limit.
    PayloadTooLarge {
        /// Serialized size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// `event_version` must be at least 1.
    BadVersion(i32),
    /// A text field contains a NUL byte, which PostgreSQL cannot store.
    NulByte(&'static str),
    /// Two messages in one `enqueue_many` call share an event_id.
    DuplicateEventId(uuid::Uuid),
    /// A `traceparent` or `tracestate` that does not follow W3C Trace Context.
    BadTraceContext(&'static str),
    /// A header whose name the relay's envelope owns (see
    /// [`crate::RESERVED_HEADERS`]): it would collide with a CloudEvents
    /// attribute or an outbox field of the same name.
    ReservedHeader {
        /// The header name.
        name: String,
        /// Why the name is reserved.
        reason: &'static str,
    },
}

impl fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyTopic => f.write_str("topic is empty"),
            Self::EmptyEventType => f.write_str("event_type is empty"),
            Self::EmptyAggregateType => f.write_str("aggregate_type is empty"),
            Self::PayloadTooLarge { size, limit } => {
                write!(
                    f,
                    "payload is {size} bytes, over the limit of {limit} bytes"
                )
            }
            Self::BadVersion(v) => write!(f, "event_version must be >= 1, got {v}"),
            Self::NulByte(field) => write!(f, "{field} contains a NUL byte"),
            Self::DuplicateEventId(id) => write!(f, "event_id {id} appears twice in one batch"),
            Self::BadTraceContext(why) => f.write_str(why),
            Self::ReservedHeader { name, reason } => {
                write!(f, "header {name:?} is reserved ({reason}); rename it")
            }
        }
    }
}

/// What kind of error an [`Error`] is, for a caller to match without
/// naming every variant (sqlx's `ErrorKind` is the model): e.g. treat
/// [`ErrorKind::DuplicateEvent`] as "already enqueued".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A schema or role name that cannot be used ([`Error::InvalidIdentifier`],
    /// [`Error::InvalidRoleName`]).
    InvalidName,
    /// A message refused before anything was written
    /// ([`Error::InvalidMessage`], [`Error::Serialize`]).
    InvalidMessage,
    /// An `event_id` given by the caller is already in the outbox
    /// ([`Error::DuplicateEvent`]).
    DuplicateEvent,
    /// The database failed or refused the statement ([`Error::Database`]).
    Database,
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidIdentifier { .. } | Self::InvalidRoleName { .. } => ErrorKind::InvalidName,
            Self::InvalidMessage(_) | Self::Serialize(_) => ErrorKind::InvalidMessage,
            Self::DuplicateEvent { .. } => ErrorKind::DuplicateEvent,
            Self::Database { .. } => ErrorKind::Database,
        }
    }
}

impl Error {
    /// Wraps a driver error (tokio-postgres, sqlx) as its source.
    pub fn database(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Database {
            source: Box::new(e),
        }
    }

    /// Wraps a tokio-postgres error as the source: [`Error::DuplicateEvent`]
    /// for a taken `event_id`, else [`Error::Database`].
    #[cfg(feature = "tokio-postgres")]
    pub fn from_tokio_postgres(e: tokio_postgres::Error) -> Self {
        let duplicate = e
            .as_db_error()
            .is_some_and(|d| d.constraint().is_some_and(is_event_id_key));
        Self::wrap(e, duplicate)
    }

    /// Wraps a sqlx error as the source, as [`Error::from_tokio_postgres`].
    #[cfg(feature = "sqlx")]
    pub fn from_sqlx(e: sqlx::Error) -> Self {
        let duplicate = e
            .as_database_error()
            .is_some_and(|d| d.constraint().is_some_and(is_event_id_key));
        Self::wrap(e, duplicate)
    }

    #[cfg(any(feature = "tokio-postgres", feature = "sqlx"))]
    fn wrap(e: impl std::error::Error + Send + Sync + 'static, duplicate: bool) -> Self {
        match duplicate {
            true => Self::DuplicateEvent {
                source: Box::new(e),
            },
            false => Self::database(e),
        }
    }
}

/// The unique constraint on `event_id` of `<schema>.messages` (migration 1).
#[cfg(any(feature = "tokio-postgres", feature = "sqlx", test))]
const EVENT_ID_KEY: &str = "messages_event_id_key";

/// Whether a unique violation on `constraint` is a taken `event_id`: the
/// table's constraint, or (docs/design/insert-only.md) the unique index of
/// one partition, named `messages_event_id_key_<partition>`.
#[cfg(any(feature = "tokio-postgres", feature = "sqlx", test))]
fn is_event_id_key(constraint: &str) -> bool {
    constraint
        .strip_prefix(EVENT_ID_KEY)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A readable one-line description of a tokio-postgres error.
#[cfg(feature = "tokio-postgres")]
pub fn describe_tokio_postgres(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_taken_event_id_is_the_table_key_or_a_partition_key() {
        assert!(is_event_id_key("messages_event_id_key"));
        assert!(is_event_id_key("messages_event_id_key_1"));
        assert!(is_event_id_key("messages_event_id_key_default"));
        assert!(!is_event_id_key("messages_event_id_keys"));
        assert!(!is_event_id_key("messages_pkey"));
        assert!(!is_event_id_key("retries_event_id_key"));
    }
    use super::*;

    #[derive(Debug)]
    struct Driver;

    impl fmt::Display for Driver {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("server said no")
        }
    }

    impl std::error::Error for Driver {}

    #[test]
    fn each_variant_has_its_kind() {
        let bad_json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        for (e, kind) in [
            (
                Error::InvalidIdentifier {
                    name: "X".into(),
                    reason: "r",
                },
                ErrorKind::InvalidName,
            ),
            (
                Error::InvalidRoleName {
                    name: "public".into(),
                    reason: "r",
                },
                ErrorKind::InvalidName,
            ),
            (
                Error::InvalidMessage(InvalidMessage::EmptyTopic),
                ErrorKind::InvalidMessage,
            ),
            (Error::Serialize(bad_json), ErrorKind::InvalidMessage),
            (
                Error::DuplicateEvent {
                    source: Box::new(Driver),
                },
                ErrorKind::DuplicateEvent,
            ),
            (Error::database(Driver), ErrorKind::Database),
        ] {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }
}
