//! The relay's maintenance, started and stopped with [`Relay::run`] under
//! its one shutdown signal, so a service that embeds the relay gets all of
//! it: the lease reaper, the heartbeat of the buckets of aggregates, the
//! archiver (when `archive_after` is set) and the backlog gauges (when
//! `gauge_interval` is set). The claim floor's sweep rides on the claims
//! themselves (`cursor.rs`).

use super::config::{FAILING_LOG_EVERY, MAX_RETRY_PAUSE};
use super::read_only::ReadOnly;
use super::Relay;
use crate::archive::{self, Archiver};
use crate::backlog::{self, BacklogGauges};
use crate::publisher::Publisher;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs `task` now and then every `every` until `shutdown`; a failure is
/// logged as `what` (at warning level at most every
/// [`FAILING_LOG_EVERY`]) and tried again within [`MAX_RETRY_PAUSE`], not
/// at the next tick: after the database comes back, a relay that owns no
/// buckets of aggregates yet must not wait a third of the bucket lease for
/// its share. Maintenance never stops the relay.
async fn every<F, Fut>(
    shutdown: &CancellationToken,
    read_only: &ReadOnly,
    every: Duration,
    what: &str,
    mut task: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = crate::Result<()>>,
{
    let mut warned: Option<tokio::time::Instant> = None;
    while !shutdown.is_cancelled() {
        let pause = match task().await {
            Ok(()) => {
                read_only.writable();
                if warned.take().is_some() {
                    tracing::info!("{what}: succeeded again");
                }
                every
            }
            Err(e) => {
                let now = tokio::time::Instant::now();
                if read_only.refused(&e) {
                    // Said once for the whole relay.
                } else if warned.map_or(true, |w| now - w >= FAILING_LOG_EVERY) {
                    tracing::warn!(error = %crate::error_chain(&e), "{what}");
                    warned = Some(now);
                } else {
                    tracing::debug!(error = %crate::error_chain(&e), "{what}");
                }
                every.min(MAX_RETRY_PAUSE)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

impl<P: Publisher> Relay<P> {
    /// Every maintenance task, until `shutdown`.
    pub(super) async fn maintain(&self, shutdown: &CancellationToken) {
        tokio::join!(
            every(
                shutdown,
                &self.read_only,
                self.config.reap_interval,
                "lease reaper failed",
                || async { self.reap().await.map(drop) }
            ),
            // With ordering off the relay only registers, so that relays
            // of the other mode can warn about the mix.
            every(
                shutdown,
                &self.read_only,
                self.config.bucket_lease / 3,
                "could not renew this relay's buckets of aggregates",
                || self.beat()
            ),
            self.archive_loop(shutdown),
            self.gauge_loop(shutdown),
        );
    }

    async fn archive_loop(&self, shutdown: &CancellationToken) {
        let Some(after) = self.config.archive_after else {
            return;
        };
        let config = archive::Config {
            older_than: after,
            ..archive::Config::default()
        };
        let archiver = match Archiver::new(self.store.clone(), config) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %crate::error_chain(&e), "archiver not started");
                return;
            }
        };
        // Checking a few times per retention period keeps the hot tables
        // near their steady size without churning on every pass.
        let every = (after / 4).clamp(Duration::from_secs(10), Duration::from_secs(3600));
        if let Err(e) = archiver.run(shutdown.clone(), every).await {
            tracing::error!(error = %crate::error_chain(&e), "archiver stopped");
        }
    }

    async fn gauge_loop(&self, shutdown: &CancellationToken) {
        let Some(interval) = self.config.gauge_interval else {
            return;
        };
        match BacklogGauges::new(self.store.clone(), backlog::Config { interval }) {
            Ok(g) => g.run(shutdown.clone()).await,
            Err(e) => {
                tracing::error!(error = %crate::error_chain(&e), "backlog gauges not started")
            }
        }
    }
}
