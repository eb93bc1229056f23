//! The backlog gauges (`outbox_messages{status}`,
//! `outbox_oldest_pending_age_seconds`), refreshed by a background task on
//! an interval, never per scrape: a probe storm or a fast scraper then
//! costs the database nothing, and the count stays cheap because it only
//! reads the hot table's partial indexes.

use crate::{metrics, Error, Result, Store};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the backlog gauges are refreshed.
#[derive(Debug, Clone)]
pub struct Config {
    /// Time between two counts.
    pub interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// Fails on a zero interval (it would count in a tight loop).
    pub fn validate(&self) -> Result<()> {
        if self.interval.is_zero() {
            return Err(Error::config("backlog interval must be above zero"));
        }
        Ok(())
    }
}

/// Counts the backlog and publishes it as gauges.
#[derive(Debug)]
pub struct BacklogGauges {
    store: Store,
    config: Config,
}

impl BacklogGauges {
    /// A refresher over `store`; fails if `config` is invalid.
    pub fn new(store: Store, config: Config) -> Result<Self> {
        config.validate()?;
        Ok(Self { store, config })
    }

    /// Counts once and sets the gauges.
    pub async fn run_once(&self) -> Result<()> {
        let backlog = self.store.count_backlog().await?;
        let oldest = self.store.oldest_waiting_age_of(None).await?;
        metrics::backlog(&backlog.by_status(), oldest);
        Ok(())
    }

    /// Refreshes every interval until `shutdown`. A failed count is logged
    /// and the gauges keep their last values; the next tick tries again.
    pub async fn run(&self, shutdown: &CancellationToken) {
        while !shutdown.is_cancelled() {
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %crate::error_chain(&e), "could not count the backlog for metrics");
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}
