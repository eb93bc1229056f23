//! The archiver: moves sent rows (and, if asked, dead rows) older than a
//! cutoff out of the live tables into `archived_messages`, or deletes them.
//!
//! It works in bounded batches, one statement and so one short transaction
//! each, so it never holds locks or a snapshot for long and the relay keeps
//! claiming meanwhile. Unsent rows (pending, processing, failed) are never
//! touched: the statements read only `messages_sent` and dead rows.
//! No SQL here: the statements are the store's, private to this crate.

use crate::store::{ArchiveBatch, ArchiveBatchParams, Store};
use crate::{Error, Result};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What to archive and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Rows sent (or gone dead) longer ago than this are taken.
    pub older_than: Duration,
    /// Rows per batch statement.
    pub batch_size: usize,
    /// Delete instead of moving to `archived_messages`.
    pub delete: bool,
    /// Also take dead rows (by `dead_at`); by default they stay for
    /// `outbox dead` to handle.
    pub include_dead: bool,
}

impl Default for Config {
    /// Seven days, batches of 1000, move, sent rows only.
    fn default() -> Self {
        Self {
            older_than: Duration::from_secs(7 * 24 * 3600),
            batch_size: 1000,
            delete: false,
            include_dead: false,
        }
    }
}

impl Config {
    /// Checks every value, naming the first bad one.
    pub fn validate(&self) -> Result<()> {
        if !(1..=100_000).contains(&self.batch_size) {
            return Err(Error::config(format!(
                "archive batch size must be 1..=100000, got {}",
                self.batch_size
            )));
        }
        Ok(())
    }
}

/// The archiver as a background service (the relay's `archive_after`):
/// what each run takes, and how often one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// What each run takes.
    pub archive: Config,
    /// Time between the starts of two runs.
    pub interval: Duration,
}

impl Default for ServiceConfig {
    /// [`Config::default`], at the interval [`ServiceConfig::after`] gives it.
    fn default() -> Self {
        Self::after(Config::default().older_than)
    }
}

impl ServiceConfig {
    /// Rows older than `older_than` (the rest of [`Config::default`]),
    /// looked for a quarter of that apart, from 10 s to an hour: a few
    /// times per retention period keeps the hot tables near their steady
    /// size without churning on every pass.
    pub fn after(older_than: Duration) -> Self {
        Self {
            archive: Config {
                older_than,
                ..Config::default()
            },
            interval: (older_than / 4).clamp(Duration::from_secs(10), Duration::from_secs(3600)),
        }
    }

    /// Checks every value, naming the first bad one.
    pub fn validate(&self) -> Result<()> {
        self.archive.validate()?;
        if self.interval.is_zero() {
            return Err(Error::config("archive interval must be positive"));
        }
        Ok(())
    }
}

/// Rows an archive run took (moved or deleted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveStats {
    /// Sent rows.
    pub sent: u64,
    /// Dead rows.
    pub dead: u64,
}

impl ArchiveStats {
    /// Sent and dead together.
    pub fn total(&self) -> u64 {
        self.sent + self.dead
    }
}

/// Archives one outbox schema; see the module docs.
#[derive(Debug, Clone)]
pub struct Archiver {
    store: Store,
    config: Config,
}

impl Archiver {
    /// An archiver; fails if the configuration is invalid.
    pub fn new(store: Store, config: Config) -> Result<Self> {
        config.validate()?;
        Ok(Self { store, config })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many rows a run started now would take (for a progress bar).
    pub async fn eligible(&self) -> Result<ArchiveStats> {
        let cutoff = self.store.archive_cutoff(self.config.older_than).await?;
        let (sent, dead) = self.store.count_archivable(cutoff).await?;
        Ok(ArchiveStats {
            sent,
            dead: if self.config.include_dead { dead } else { 0 },
        })
    }

    /// One run: every row older than the cutoff, batch by batch.
    pub async fn run_once(&self) -> Result<ArchiveStats> {
        self.run_once_with(None, |_| {}).await
    }

    /// One run, calling `progress` with the running totals after each
    /// batch and stopping between batches once `shutdown` is cancelled.
    pub async fn run_once_with(
        &self,
        shutdown: Option<&CancellationToken>,
        mut progress: impl FnMut(&ArchiveStats),
    ) -> Result<ArchiveStats> {
        // Fixed once, so the run ends even while new rows keep ageing past it.
        let cutoff = self.store.archive_cutoff(self.config.older_than).await?;
        let (sent_kind, dead_kind) = if self.config.delete {
            (ArchiveBatch::DeleteSent, ArchiveBatch::DeleteDead)
        } else {
            (ArchiveBatch::MoveSent, ArchiveBatch::MoveDead)
        };
        let mut kinds = vec![sent_kind];
        if self.config.include_dead {
            kinds.push(dead_kind);
        }
        let mut stats = ArchiveStats::default();
        for kind in kinds {
            loop {
                if shutdown.is_some_and(CancellationToken::is_cancelled) {
                    return Ok(stats);
                }
                let n = self
                    .store
                    .archive_batch(ArchiveBatchParams {
                        kind,
                        cutoff,
                        limit: self.config.batch_size as i64,
                    })
                    .await?;
                // Stop on an empty batch, not a short one: SKIP LOCKED may
                // shorten a batch while another archiver holds some rows.
                if n == 0 {
                    break;
                }
                match kind {
                    ArchiveBatch::MoveSent | ArchiveBatch::DeleteSent => stats.sent += n,
                    ArchiveBatch::MoveDead | ArchiveBatch::DeleteDead => stats.dead += n,
                }
                progress(&stats);
            }
        }
        Ok(stats)
    }
}

/// An [`Archiver`] run now and then every interval, until shutdown.
#[derive(Debug, Clone)]
pub struct ArchiveService {
    archiver: Archiver,
    interval: Duration,
}

impl ArchiveService {
    /// The service; fails if `config` is invalid.
    pub fn new(store: Store, config: ServiceConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            archiver: Archiver::new(store, config.archive)?,
            interval: config.interval,
        })
    }

    /// Runs [`Archiver::run_once`] now and then every interval until
    /// `shutdown` is cancelled, stopping between batches once it is. A
    /// failed run is logged and tried again next time; the relay must not
    /// stop because archiving hit a transient error.
    pub async fn run(&self, shutdown: &CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.archiver.run_once_with(Some(shutdown), |_| {}).await {
                Ok(s) if s.total() > 0 => tracing::info!(
                    sent = s.sent,
                    dead = s.dead,
                    delete = self.archiver.config.delete,
                    "archived old messages"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "archiving failed; will retry")
                }
            }
        }
    }
}
