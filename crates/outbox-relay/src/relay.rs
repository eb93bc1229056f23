//! The relay loop: claim a batch, publish it outside any transaction,
//! settle it in one statement. No SQL here; see [`crate::store`].

use crate::clock::{Clock, SystemClock};
use crate::publisher::Publisher;
use crate::retry::RetryPolicy;
use crate::store::{ClaimParams, Lease, SettleParams, Settled, Store};
use crate::{Error, Message, Outcome, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How the relay runs.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Written to `locked_by`; unique per process by default.
    pub relay_id: String,
    /// Messages claimed per batch.
    pub batch_size: usize,
    /// A claim older than this is presumed dead and its rows are recovered.
    pub lease: Duration,
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
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            relay_id: default_relay_id(),
            batch_size: 500,
            lease: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            idle_sleep: Duration::from_secs(1),
            reap_interval: Duration::from_secs(30),
            notify: true,
            concurrency: 1,
            rate_limit: None,
            archive_after: None,
        }
    }
}

impl RelayConfig {
    /// Checks every value, naming the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.relay_id.trim().is_empty() || self.relay_id.len() > 200 {
            return bad("relay id must be 1 to 200 characters".into());
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return bad(format!(
                "batch size must be 1..=10000, got {}",
                self.batch_size
            ));
        }
        if self.idle_sleep.is_zero() {
            return bad("idle sleep must be positive".into());
        }
        if !(1..=64).contains(&self.concurrency) {
            return bad(format!(
                "concurrency must be 1..=64, got {}",
                self.concurrency
            ));
        }
        if self.rate_limit == Some(0) {
            return bad("rate limit must be positive (omit it for no limit)".into());
        }
        if self.reap_interval.is_zero() {
            return bad("reap interval must be positive".into());
        }
        self.retry.validate().map_err(Error::Config)
    }
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

/// What one pass did; printed by `outbox relay --once`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows the publisher accepted.
    pub published: usize,
    /// Rows settled as sent.
    pub marked_sent: u64,
    /// Rows settled as failed (to retry) or dead.
    pub failed: u64,
    /// Of `failed`, how many went to dead.
    pub dead: u64,
}

impl std::fmt::Display for PassStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "claimed={} published={} marked_sent={} failed={}",
            self.claimed, self.published, self.marked_sent, self.failed
        )
    }
}

/// A batch that was claimed and handed to the publisher but not yet
/// settled: the crash window lives between this and [`Relay::settle`].
#[derive(Debug)]
pub struct PublishedBatch {
    lease: Option<Lease>,
    messages: Vec<Message>,
    outcomes: Vec<Outcome>,
}

impl PublishedBatch {
    /// Rows claimed.
    pub fn claimed(&self) -> usize {
        self.messages.len()
    }

    /// Rows the publisher accepted.
    pub fn published(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_ok()).count()
    }
}

/// The relay engine over one outbox schema and one publisher.
#[derive(Debug)]
pub struct Relay<P> {
    store: Store,
    publisher: P,
    config: RelayConfig,
    clock: Arc<dyn Clock>,
}

impl<P: Publisher> Relay<P> {
    /// A relay; fails if the configuration is invalid.
    pub fn new(store: Store, publisher: P, config: RelayConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            store,
            publisher,
            config,
            clock: Arc::new(SystemClock),
        })
    }

    /// Replaces the clock used for retry scheduling.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// One pass: claim a batch, publish it, settle it.
    pub async fn run_once(&self) -> Result<PassStats> {
        let batch = self.claim_and_publish().await?;
        self.settle(batch).await
    }

    /// Claims a batch and publishes it, without settling.
    pub async fn claim_and_publish(&self) -> Result<PublishedBatch> {
        let claimed = self
            .store
            .claim_messages(ClaimParams {
                limit: self.config.batch_size as i64,
                relay_id: &self.config.relay_id,
            })
            .await?;
        let outcomes = if claimed.messages.is_empty() {
            Vec::new()
        } else {
            let mut outcomes = self.publisher.publish(&claimed.messages).await;
            if outcomes.len() != claimed.messages.len() {
                // A publisher bug must not mark unpublished rows sent.
                let e = crate::PublishError::retryable(format!(
                    "publisher {} returned {} outcomes for {} messages",
                    self.publisher.name(),
                    outcomes.len(),
                    claimed.messages.len()
                ));
                outcomes = vec![Err(e); claimed.messages.len()];
            }
            outcomes
        };
        Ok(PublishedBatch {
            lease: claimed.lease,
            messages: claimed.messages,
            outcomes,
        })
    }

    /// Settles a published batch in one statement: sent, failed with the
    /// next retry time, or dead (permanent error or retries used up).
    pub async fn settle(&self, batch: PublishedBatch) -> Result<PassStats> {
        let mut stats = PassStats {
            claimed: batch.claimed(),
            published: batch.published(),
            ..PassStats::default()
        };
        let Some(lease) = batch.lease else {
            return Ok(stats);
        };
        let now = self.clock.now();
        let policy = &self.config.retry;
        let mut p = SettleParams::default();
        for (m, outcome) in batch.messages.iter().zip(batch.outcomes) {
            match outcome {
                Ok(()) => p.sent.push(m.id),
                Err(e) if e.is_retryable() && !policy.exhausted(m.attempts) => {
                    let mut at = policy.next_run_at(m.attempts, now);
                    if let Some(after) = e
                        .retry_after
                        .and_then(|d| chrono::Duration::from_std(d).ok())
                    {
                        at = at.max(now + after);
                    }
                    p.failed.push((m.id, e.message, at));
                }
                Err(e) if e.is_retryable() => p.dead.push((
                    m.id,
                    format!(
                        "max attempts ({}) reached: {}",
                        policy.max_attempts, e.message
                    ),
                )),
                Err(e) => p.dead.push((m.id, format!("permanent: {}", e.message))),
            }
        }
        let Settled { sent, failed, dead } = self.store.settle_messages(&lease, &p).await?;
        let expected = (p.sent.len() + p.failed.len() + p.dead.len()) as u64;
        if sent + failed + dead < expected {
            tracing::warn!(
                lost = expected - (sent + failed + dead),
                "lease lost before settling; another relay owns those rows now"
            );
        }
        stats.marked_sent = sent;
        stats.failed = failed + dead;
        stats.dead = dead;
        Ok(stats)
    }

    /// Recovers rows whose lease expired.
    pub async fn reap(&self) -> Result<usize> {
        let ids = self.store.reap_expired_leases(self.config.lease).await?;
        if !ids.is_empty() {
            tracing::warn!(count = ids.len(), "recovered messages from expired leases");
        }
        Ok(ids.len())
    }

    /// Runs until `shutdown` is cancelled. A batch in flight is published
    /// and settled before returning. Database errors are logged and retried
    /// with backoff; the relay does not exit on a transient fault.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        let mut next_reap = Instant::now();
        let mut error_backoff = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            if Instant::now() >= next_reap {
                if let Err(e) = self.reap().await {
                    tracing::warn!(error = %e, "lease reaper failed");
                }
                next_reap = Instant::now() + self.config.reap_interval;
            }
            let pause = match self.run_once().await {
                Ok(stats) => {
                    error_backoff = Duration::from_millis(100);
                    if stats.claimed > 0 {
                        tracing::debug!(%stats, "pass");
                        continue;
                    }
                    self.config.idle_sleep
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?error_backoff, "relay pass failed");
                    let pause = error_backoff;
                    error_backoff = (error_backoff * 2).min(Duration::from_secs(10));
                    pause
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        Ok(())
    }
}
