//! The outbox relay engine: moves committed outbox rows to a broker, at
//! least once.
//!
//! # Layout
//! - `store` (private): every database call of the engine, one function per
//!   statement, and the types they return; the SQL is in `store/sql/`, one
//!   `.sql` file per statement whose header documents its parameters and
//!   result columns, loaded at compile time, every result column named and
//!   read by name, every row read checked. `store` imports nothing of
//!   `relay`: the arrow goes one way, relay → store. Outside this crate only
//!   the [`Store`] handle is seen (`Store::new(pool, schema)`, what
//!   [`Relay::new`] and the other handles take).
//! - [`admin`]: what other crates may read through the store ([`Admin`]:
//!   migrations, counts, ages, ping, the operator page's snapshot), the
//!   value types shown ([`admin::Timestamp`], [`admin::DeadMessage`], ...),
//!   and the checked read [`admin::get`].
//! - [`relay`]: the loop — claim (leased, `FOR UPDATE SKIP LOCKED`), publish
//!   outside any transaction, settle in one statement guarded by the lease.
//! - [`publisher`]: the [`Publisher`] trait and its typed errors.
//! - [`publishers`]: one folder per destination, each behind a feature;
//!   [`publishers::AnyPublisher`] is built from a `--publisher` URL. The
//!   postgres publisher keeps its sink's statements (`postgres/sql/*.sql`) and
//!   reads its sink back typed (`published_after`, `published_count`).
//! - [`retry`]: the backoff schedule, a pure function of (attempt, now).
//! - [`clock`]: the injected clock.
//! - [`dead`]: dead-letter handling ([`DeadLetters`]: list, show, replay, purge).
//! - [`archive`]: the [`Archiver`], moving old sent/dead rows out of the live tables.
//! - [`metrics`]: every metric's name, and the events that log and count;
//!   [`backlog`]: the background task behind the backlog gauges.
//! - Benchmarks are not here: the `outbox-bench` crate drives this engine
//!   (the `outbox bench` scenarios).

pub mod admin;
pub mod archive;
pub mod backlog;
mod clock;
pub mod connect;
pub mod dead;
mod debug;
pub mod envelope;
mod error;
pub mod listener;
mod message;
pub mod metrics;
pub mod publisher;
pub mod publishers;
pub mod redact;
pub mod relay;
pub mod retry;
mod store;

pub use admin::Admin;
pub use archive::{ArchiveStats, Archiver};
pub use backlog::BacklogGauges;
pub use clock::{Clock, ManualClock, SystemClock};
pub use dead::{DeadLetters, NotReplayed, ReplayTarget};
pub use envelope::Envelope;
pub use error::{error_chain, BoxError, Error, ErrorKind, Result};
pub use message::{Message, Payload};
pub use publisher::{Accepted, BatchOrder, ErrorClass, Outcome, PublishError, Publisher};
pub use relay::{PassStats, PublishedBatch, Relay, RelayConfig};
pub use retry::RetryPolicy;
pub use store::Store;

/// Builds a connection pool for `url` (a libpq-style URL or key=value
/// string, with libpq's TLS parameters: [`connect`]).
///
/// On a `SQL_ASCII` database each connection asks for `SQL_ASCII` as its
/// client encoding: such a database stores any byte, and the server refuses
/// to send a byte that is not UTF-8 to a UTF-8 client, failing the whole
/// statement (one such row stopped every claim of every relay, and every
/// `dead list`). Raw, the bytes reach the relay, whose checked reads fail
/// that row alone, naming the column ([`admin::get`]).
pub fn pool(url: &str, max_size: usize) -> Result<deadpool_postgres::Pool> {
    pool_for(connect::target(url)?, max_size)
}

/// [`pool`] on a parsed target (one [`connect::Target::named`], say).
pub fn pool_for(target: connect::Target, max_size: usize) -> Result<deadpool_postgres::Pool> {
    pool_configured(target, deadpool_postgres::PoolConfig::new(max_size))
}

/// [`pool_for`] with the pool's size and timeouts given.
pub fn pool_configured(
    target: connect::Target,
    config: deadpool_postgres::PoolConfig,
) -> Result<deadpool_postgres::Pool> {
    build_pool(target, config, None)
}

/// [`pool_for`], each connection's cancel key kept in `cancels`, so a
/// command stopped by a signal can cancel on the server what its
/// connections are running ([`connect::Cancels::cancel_all`]).
pub fn pool_cancellable(
    target: connect::Target,
    max_size: usize,
    cancels: &connect::Cancels,
) -> Result<deadpool_postgres::Pool> {
    build_pool(
        target,
        deadpool_postgres::PoolConfig::new(max_size),
        Some(cancels.clone()),
    )
}

fn build_pool(
    target: connect::Target,
    config: deadpool_postgres::PoolConfig,
    cancels: Option<connect::Cancels>,
) -> Result<deadpool_postgres::Pool> {
    use deadpool_postgres::{HookError, Manager, ManagerConfig, RecyclingMethod, Runtime};
    let tls = target.tls.clone();
    let manager = Manager::from_config(
        target.config,
        target.tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .config(config)
        .runtime(Runtime::Tokio1)
        .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
            if let Some(c) = &cancels {
                c.keep(client.cancel_token(), tls.clone());
            }
            Box::pin(async move {
                client
                    .batch_execute(store::sql_ascii_raw())
                    .await
                    .map_err(HookError::Backend)
            })
        }))
        .build()
        .map_err(|e| Error::config_from("bad database URL", e))
}
