//! The heartbeat: renews this relay's registration and, with ordering on,
//! its leases on buckets of aggregates (taking or giving buckets back as
//! relays come and go), while the pipelines are busy publishing; claims
//! also beat when due (`ordered.rs`). A service with its own config,
//! derived from the [`RelayConfig`]'s `bucket_lease`.

use super::config::{bounded, RelayConfig, MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY};
use super::maintain::every;
use super::Relay;
use crate::publisher::Publisher;
use crate::{Error, Result};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the heartbeat runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatConfig {
    /// How long a relay's buckets are its own without a beat: after this,
    /// a relay that died gives its share to the others.
    pub bucket_lease: Duration,
    /// Time between two beats: well within the lease.
    pub interval: Duration,
}

impl Default for HeartbeatConfig {
    /// The relay's default `bucket_lease`, renewed every third of it.
    fn default() -> Self {
        RelayConfig::default().heartbeat()
    }
}

impl HeartbeatConfig {
    /// Renewed every third of `bucket_lease`: two beats may fail before a
    /// live relay loses its share.
    pub(crate) fn with_lease(bucket_lease: Duration) -> Self {
        Self {
            bucket_lease,
            interval: bucket_lease / 3,
        }
    }

    /// Checks every value, naming the first bad one.
    pub(crate) fn validate(&self) -> Result<()> {
        bounded(
            "bucket lease",
            self.bucket_lease,
            MIN_BUCKET_LEASE,
            Some(MIN_BUCKET_LEASE_WHY),
        )?;
        if self.interval.is_zero() || self.interval >= self.bucket_lease {
            return Err(Error::config(format!(
                "heartbeat interval must be positive and shorter than the bucket lease ({:?}), got {:?}",
                self.bucket_lease, self.interval
            )));
        }
        Ok(())
    }
}

/// The heartbeat of one relay.
#[derive(Debug)]
pub(crate) struct Heartbeat<'r, P> {
    relay: &'r Relay<P>,
    config: HeartbeatConfig,
}

impl<'r, P: Publisher> Heartbeat<'r, P> {
    /// A heartbeat; fails if `config` is invalid.
    pub fn new(relay: &'r Relay<P>, config: HeartbeatConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { relay, config })
    }

    /// Now, then every interval until `shutdown`; a failed beat is tried
    /// again within a retry pause, not at the next interval: after the
    /// database comes back, a relay that owns no buckets yet must not wait
    /// a third of the lease for its share (see [`every`]). With ordering
    /// off the relay only registers, so that relays of the other mode can
    /// warn about the mix.
    pub async fn run(&self, shutdown: &CancellationToken) {
        every(
            shutdown,
            &self.relay.read_only,
            self.config.interval,
            "could not renew this relay's buckets of aggregates",
            || self.relay.beat(),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_beats_every_third_of_the_relays_bucket_lease() {
        let h = HeartbeatConfig::default();
        assert_eq!(h.bucket_lease, RelayConfig::default().bucket_lease);
        assert_eq!(h.interval, h.bucket_lease / 3);
        h.validate().unwrap();
    }

    #[test]
    fn a_beat_that_would_come_after_the_lease_ends_is_refused() {
        let late = HeartbeatConfig {
            interval: Duration::from_secs(30),
            ..HeartbeatConfig::with_lease(Duration::from_secs(30))
        };
        assert!(late
            .validate()
            .unwrap_err()
            .to_string()
            .contains("heartbeat interval"));
        let short = HeartbeatConfig::with_lease(Duration::from_millis(10));
        assert!(short
            .validate()
            .unwrap_err()
            .to_string()
            .contains("bucket lease"));
    }
}
