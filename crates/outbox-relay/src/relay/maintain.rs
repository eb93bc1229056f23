//! The relay's maintenance services, started and stopped with
//! [`Relay::run`] under its one shutdown signal, so a service that embeds
//! the relay gets all of them: the lease reaper (`reaper.rs`), the
//! heartbeat of the buckets of aggregates (`heartbeat.rs`), the archiver
//! ([`ArchiveService`], when `archive_after` is set) and the backlog gauges
//! ([`BacklogGauges`], when `gauge_interval` is set). Each is a struct with
//! its own config (interval, limits), derived from the [`RelayConfig`]
//! (`config.rs`), validated when built, and run by one call until the
//! shutdown. The claim floor's sweep rides on the claims themselves
//! (`cursor.rs`).
//!
//! [`RelayConfig`]: super::RelayConfig

use super::config::{FAILING_LOG_EVERY, MAX_RETRY_PAUSE};
use super::heartbeat::Heartbeat;
use super::read_only::ReadOnly;
use super::reaper::Reaper;
use super::Relay;
use crate::archive::ArchiveService;
use crate::backlog::BacklogGauges;
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
pub(super) async fn every<F, Fut>(
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

/// Logs a service whose config was refused (never, from a valid
/// [`RelayConfig`](super::RelayConfig)): the relay runs on without it.
fn not_started(what: &str, e: &crate::Error) {
    tracing::error!(error = %crate::error_chain(e), "{what} not started");
}

impl<P: Publisher> Relay<P> {
    /// Every maintenance service, until `shutdown`.
    pub(super) async fn maintain(&self, shutdown: &CancellationToken) {
        let c = &self.config;
        let reaper = async {
            match Reaper::new(self, c.reaper()) {
                Ok(s) => s.run(shutdown).await,
                Err(e) => not_started("lease reaper", &e),
            }
        };
        let heartbeat = async {
            match Heartbeat::new(self, c.heartbeat()) {
                Ok(s) => s.run(shutdown).await,
                Err(e) => not_started("heartbeat", &e),
            }
        };
        let archiver = async {
            match c
                .archiver()
                .map(|a| ArchiveService::new(self.store.clone(), a))
            {
                Some(Ok(s)) => s.run(shutdown).await,
                Some(Err(e)) => not_started("archiver", &e),
                None => {}
            }
        };
        let gauges = async {
            match c
                .gauges()
                .map(|g| BacklogGauges::new(self.store.clone(), g))
            {
                Some(Ok(s)) => s.run(shutdown).await,
                Some(Err(e)) => not_started("backlog gauges", &e),
                None => {}
            }
        };
        tokio::join!(reaper, heartbeat, archiver, gauges);
    }
}
