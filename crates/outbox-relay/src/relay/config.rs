//! How a relay runs: every knob with its default and its validation.

use super::heartbeat::HeartbeatConfig;
use super::reaper::ReaperConfig;
use crate::retry::RetryPolicy;
use crate::{archive, backlog};
use crate::{Error, Result};
use std::time::Duration;

/// The shortest lease accepted. The lease is kept alive by an UPDATE every
/// half lease; below a second, one slow round trip (a busy pool, a
/// checkpoint) lets it expire under a live publish and another relay
/// publishes the rows again (`--lease 1ms` duplicated 27 % of messages).
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest a pipeline (or the LISTEN connection) waits before trying
/// the database again after a failure. Short: the relay must send again
/// within a second once the database is back from a restart (this pause,
/// then a new connection and a claim), and a try against a database that
/// is down costs it one refused connection.
pub const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// While the database keeps failing, a pipeline says so at warning level
/// at most this often (and at debug level in between).
pub const FAILING_LOG_EVERY: Duration = Duration::from_secs(30);

/// Why [`MIN_LEASE`], as every error refusing a shorter lease says it.
pub const MIN_LEASE_WHY: &str = "it is extended every half lease by a database round trip";

/// The shortest publish timeout accepted: a broker's ack takes
/// milliseconds, and a deadline below this would fail healthy batches.
pub const MIN_PUBLISH_TIMEOUT: Duration = Duration::from_millis(100);

/// Why [`MIN_PUBLISH_TIMEOUT`], for errors.
pub const MIN_PUBLISH_TIMEOUT_WHY: &str = "shorter would fail healthy batches";

/// The longest lease or publish timeout accepted: a century. Longer is a
/// typo, and the reaper's `now() - lease` stops being a timestamp.
const MAX_DURATION: Duration = crate::retry::MAX_DELAY;

/// How long a published batch's settle is tried again after database
/// errors (within its lease) before its rows are left to the reaper.
pub const SETTLE_RETRY_FOR: Duration = Duration::from_secs(30);

/// The shortest database-call deadline accepted.
pub const MIN_DB_TIMEOUT: Duration = Duration::from_secs(1);

/// Why [`MIN_DB_TIMEOUT`], for errors.
pub const MIN_DB_TIMEOUT_WHY: &str = "a healthy claim of a full batch may take that long";

/// The shortest bucket lease accepted: it is renewed every third of the
/// lease by a database round trip.
pub const MIN_BUCKET_LEASE: Duration = Duration::from_secs(1);

/// Why [`MIN_BUCKET_LEASE`], for errors.
pub const MIN_BUCKET_LEASE_WHY: &str =
    "it is renewed every third of the lease by a database round trip";

/// Messages per claim accepted: one claim's rows are one statement's
/// parameters and one batch in memory.
pub const BATCH_SIZE_RANGE: std::ops::RangeInclusive<usize> = 1..=10_000;

/// Pipelines accepted: each holds a database connection while it claims
/// and settles.
pub const CONCURRENCY_RANGE: std::ops::RangeInclusive<usize> = 1..=64;

/// Whether messages of one aggregate are published in id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// Message k+1 of an aggregate (`aggregate_type`, `aggregate_id`) is
    /// handed to the publisher only after message k is sent or dead, across
    /// pipelines and relays; other aggregates flow in parallel.
    #[default]
    Aggregate,
    /// No order: batches go out in parallel, retries are overtaken. Every
    /// relay of a schema must use the same mode.
    None,
}

impl Ordering {
    /// As written in the config (`aggregate`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aggregate => "aggregate",
            Self::None => "none",
        }
    }
}

impl std::str::FromStr for Ordering {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "aggregate" => Ok(Self::Aggregate),
            "none" => Ok(Self::None),
            other => Err(format!(
                "ordering must be `aggregate` (order per aggregate) or `none`, got {other:?}"
            )),
        }
    }
}

/// How the relay runs.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Written to `locked_by`; unique per process by default.
    pub relay_id: String,
    /// Messages claimed per batch.
    pub batch_size: usize,
    /// A claim older than this is presumed dead and its rows are recovered.
    /// Extended every half lease while a batch is publishing; at least
    /// [`MIN_LEASE`].
    pub lease: Duration,
    /// How long one batch may take to publish; then every message of it
    /// fails retryably ("publish timed out"), spending an attempt, so a
    /// destination that never answers cannot hold rows (and their lease)
    /// forever. At least [`MIN_PUBLISH_TIMEOUT`].
    pub publish_timeout: Duration,
    /// Longest one database call may take (taking a connection, then the
    /// statement); past it the connection is dropped and the call retried
    /// on a new one, so a partition that drops packets without closing
    /// anything cannot hold the relay. At least [`MIN_DB_TIMEOUT`].
    pub db_timeout: Duration,
    /// When failed messages are retried, and how often.
    pub retry: RetryPolicy,
    /// Sleep when a pass found nothing to do (NOTIFY wakes the relay
    /// earlier; without NOTIFY this is the poll interval).
    pub idle_sleep: Duration,
    /// How often `run` looks for expired leases.
    pub reap_interval: Duration,
    /// LISTEN for the producers' NOTIFY to wake up at once; off for
    /// transaction-mode PgBouncer.
    pub notify: bool,
    /// Claim/publish pipelines run in parallel.
    pub concurrency: usize,
    /// At most this many messages per second, if set.
    pub rate_limit: Option<u32>,
    /// Archive sent rows older than this, periodically, if set.
    pub archive_after: Option<Duration>,
    /// Refresh the backlog gauges (`outbox_messages{status}`,
    /// `outbox_oldest_pending_age_seconds`) this often, if set: one count of
    /// the hot table each time, so set it where a metrics recorder is
    /// installed.
    pub gauge_interval: Option<Duration>,
    /// After SIGTERM, how long a batch in flight may take to publish before
    /// its claims are released (back to pending, no attempt spent).
    pub shutdown_grace: Duration,
    /// Longest pause between probes of a destination that is down.
    pub breaker_max_backoff: Duration,
    /// How often a claim reads the claimable index from its start instead of
    /// from the claim floor, for rows that went back to the queue below it
    /// without this relay knowing (another relay's failures, the reaper,
    /// replays). See [`crate::relay::ClaimCursor`].
    pub sweep_interval: Duration,
    /// A claim stops adding rows once their payloads pass this many bytes
    /// (it always takes one): bounds what one batch holds in memory.
    pub max_batch_bytes: usize,
    /// A payload larger than this (its JSON text as PostgreSQL renders it)
    /// is never loaded: the message goes dead naming the limit.
    pub max_message_bytes: usize,
    /// Order per aggregate (the default), or none.
    pub ordering: Ordering,
    /// With ordering on, each relay leases a share of the aggregates (by
    /// hash bucket) for this long, renewed every third of it; a relay that
    /// dies gives its share to the others after this long. At least
    /// [`MIN_BUCKET_LEASE`].
    pub bucket_lease: Duration,
}

/// Default [`RelayConfig::max_message_bytes`]: twice the library's enqueue
/// limit ([`outbox::DEFAULT_MAX_PAYLOAD_BYTES`], 1 MiB of compact JSON).
/// PostgreSQL renders jsonb with a space after every `:` and `,`, up to
/// 1.5 times longer, so nothing the library accepted by default goes dead.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 2 * outbox::DEFAULT_MAX_PAYLOAD_BYTES;

/// Default [`RelayConfig::max_batch_bytes`]: 16 MiB.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 16 << 20;

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            relay_id: default_relay_id(),
            batch_size: 500,
            lease: Duration::from_secs(300),
            publish_timeout: Duration::from_secs(30),
            db_timeout: crate::store::DEFAULT_DEADLINE,
            retry: RetryPolicy::default(),
            idle_sleep: Duration::from_secs(1),
            reap_interval: Duration::from_secs(30),
            notify: true,
            concurrency: 4,
            rate_limit: None,
            archive_after: None,
            gauge_interval: None,
            shutdown_grace: Duration::from_secs(10),
            breaker_max_backoff: Duration::from_secs(30),
            sweep_interval: Duration::from_secs(5),
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            ordering: Ordering::Aggregate,
            bucket_lease: Duration::from_secs(30),
        }
    }
}

impl RelayConfig {
    /// Checks every value, naming the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::config(m));
        if self.relay_id.trim().is_empty() || self.relay_id.len() > 200 {
            return bad("relay id must be 1 to 200 characters".into());
        }
        if !BATCH_SIZE_RANGE.contains(&self.batch_size) {
            return bad(format!(
                "batch size must be {BATCH_SIZE_RANGE:?}, got {}",
                self.batch_size
            ));
        }
        bounded("lease", self.lease, MIN_LEASE, Some(MIN_LEASE_WHY))?;
        bounded(
            "publish timeout",
            self.publish_timeout,
            MIN_PUBLISH_TIMEOUT,
            Some(MIN_PUBLISH_TIMEOUT_WHY),
        )?;
        bounded(
            "database timeout",
            self.db_timeout,
            MIN_DB_TIMEOUT,
            Some(MIN_DB_TIMEOUT_WHY),
        )?;
        self.heartbeat().validate()?;
        if self.idle_sleep.is_zero() {
            return bad("idle sleep must be positive".into());
        }
        if !CONCURRENCY_RANGE.contains(&self.concurrency) {
            return bad(format!(
                "concurrency must be {CONCURRENCY_RANGE:?}, got {}",
                self.concurrency
            ));
        }
        if self.rate_limit == Some(0) {
            return bad("rate limit must be positive (omit it for no limit)".into());
        }
        if self.breaker_max_backoff.is_zero() {
            return bad("breaker max backoff must be positive".into());
        }
        if self.gauge_interval.is_some_and(|i| i.is_zero()) {
            return bad("gauge interval must be positive".into());
        }
        if self.archive_after.is_some_and(|a| a.is_zero()) {
            return bad("archive after must be positive".into());
        }
        self.reaper().validate()?;
        if self.sweep_interval.is_zero() {
            return bad("sweep interval must be positive".into());
        }
        if self.max_batch_bytes == 0 || self.max_batch_bytes > i64::MAX as usize {
            return bad("max batch bytes must be positive".into());
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > i64::MAX as usize {
            return bad("max message bytes must be positive".into());
        }
        self.retry.validate().map_err(Error::config)
    }
}

/// The configs of the relay's maintenance services (`maintain.rs`),
/// derived from the relay's settings: each is declared once, here.
impl RelayConfig {
    /// The lease reaper's: every `reap_interval`, rows older than `lease`.
    pub(crate) fn reaper(&self) -> ReaperConfig {
        ReaperConfig {
            interval: self.reap_interval,
            lease: self.lease,
        }
    }

    /// The heartbeat's: buckets leased for `bucket_lease`.
    pub(crate) fn heartbeat(&self) -> HeartbeatConfig {
        HeartbeatConfig::with_lease(self.bucket_lease)
    }

    /// The archiver's, if `archive_after` is set.
    pub(crate) fn archiver(&self) -> Option<archive::ServiceConfig> {
        self.archive_after.map(archive::ServiceConfig::after)
    }

    /// The backlog gauges', if `gauge_interval` is set.
    pub(crate) fn gauges(&self) -> Option<backlog::Config> {
        self.gauge_interval
            .map(|interval| backlog::Config { interval })
    }
}

/// `d` from `min` (for `why`, if said) to 100 years, or the error naming
/// `what`.
pub(super) fn bounded(what: &str, d: Duration, min: Duration, why: Option<&str>) -> Result<()> {
    if (min..=MAX_DURATION).contains(&d) {
        return Ok(());
    }
    let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
    Err(Error::config(format!(
        "{what} must be at least {min:?}{why} and at most 100 years, got {d:?}"
    )))
}

/// `<host>-<pid>-<random>`: unique per process, readable in `locked_by`.
pub fn default_relay_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}
