//! The lease reaper: recovers rows whose claim outlived its lease (the
//! claimant died, or its publish outlived the lease), counting the expiry
//! as a failed attempt. A service with its own config, derived from the
//! [`RelayConfig`]'s `reap_interval` and `lease`.

use super::config::{bounded, RelayConfig, MIN_LEASE, MIN_LEASE_WHY};
use super::maintain::every;
use super::Relay;
use crate::publisher::Publisher;
use crate::store::ReapParams;
use crate::{Error, Result};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the reaper runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReaperConfig {
    /// Time between two passes.
    pub interval: Duration,
    /// Rows claimed longer ago than this are recovered.
    pub lease: Duration,
}

impl Default for ReaperConfig {
    /// The relay's defaults (`reap_interval`, `lease`).
    fn default() -> Self {
        RelayConfig::default().reaper()
    }
}

impl ReaperConfig {
    /// Checks every value, naming the first bad one.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.interval.is_zero() {
            return Err(Error::config("reap interval must be positive"));
        }
        bounded("lease", self.lease, MIN_LEASE, Some(MIN_LEASE_WHY))
    }
}

/// The reaper of one relay: what it recovers, the relay's gates and claim
/// cursor learn.
#[derive(Debug)]
pub(crate) struct Reaper<'r, P> {
    relay: &'r Relay<P>,
    config: ReaperConfig,
}

impl<'r, P: Publisher> Reaper<'r, P> {
    /// A reaper; fails if `config` is invalid.
    pub fn new(relay: &'r Relay<P>, config: ReaperConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { relay, config })
    }

    /// Now, then every interval until `shutdown`; a failed pass is tried
    /// again within a retry pause (see [`every`]).
    pub async fn run(&self, shutdown: &CancellationToken) {
        every(
            shutdown,
            &self.relay.read_only,
            self.config.interval,
            "lease reaper failed",
            || async {
                self.relay
                    .reap_older_than(self.config.lease)
                    .await
                    .map(drop)
            },
        )
        .await
    }
}

impl<P: Publisher> Relay<P> {
    /// Recovers rows whose lease expired, counting the expiry as a failed
    /// attempt (so a message that kills its relay backs off, then goes dead
    /// at max attempts). Returns how many rows were recovered.
    pub async fn reap(&self) -> Result<usize> {
        self.reap_older_than(self.config.reaper().lease).await
    }

    /// Recovers rows claimed longer than `age` ago, whatever the lease:
    /// for an operator (or the demo) who knows the claimant is dead. The
    /// expiry counts as a failed attempt, as in [`Self::reap`].
    pub async fn reap_older_than(&self, age: Duration) -> Result<usize> {
        let policy = &self.config.retry;
        let reaped = self
            .store
            .reap_expired_leases(&ReapParams {
                lease: age,
                max_attempts: policy.max_attempts,
                backoff: &policy.schedule,
                jitter: policy.jitter,
            })
            .await?;
        crate::metrics::lease_recovered(reaped.len());
        {
            // Rows of a chain this relay still counts as in flight (its
            // publish outlived the lease): the aggregate waits for them.
            let mut gates = self.order.gates();
            reaped
                .iter()
                .filter(|r| !r.dead)
                .for_each(|r| gates.reaped(r.key, r.id));
        }
        let mut cursor = self.cursor();
        // Recovered rows are claimable again, below the claim floor, once due.
        reaped
            .iter()
            .filter(|r| !r.dead)
            .for_each(|r| cursor.failed(r.id, r.next_run_at));
        Ok(reaped.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_relays() {
        let d = RelayConfig::default();
        let r = ReaperConfig::default();
        assert_eq!((r.interval, r.lease), (d.reap_interval, d.lease));
        r.validate().unwrap();
    }

    #[test]
    fn a_zero_interval_or_a_short_lease_is_refused() {
        let zero = ReaperConfig {
            interval: Duration::ZERO,
            ..ReaperConfig::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("reap interval"));
        let short = ReaperConfig {
            lease: Duration::from_millis(1),
            ..ReaperConfig::default()
        };
        assert!(short.validate().unwrap_err().to_string().contains("lease"));
    }
}
