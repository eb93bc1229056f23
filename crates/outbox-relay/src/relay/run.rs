//! The long-running relay: `concurrency` pipelines of claim → publish →
//! settle, woken by NOTIFY (or the poll interval), the maintenance beside
//! them (`maintain.rs`), the breaker pausing claims while the destination
//! is down, and a shutdown that finishes or releases the batches in flight.

use super::config::{FAILING_LOG_EVERY, MAX_RETRY_PAUSE};
use super::read_only::ReadOnly;
use super::{PassStats, Relay};
use crate::listener::{listen, Listen};
use crate::publisher::Publisher;
use crate::Result;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

impl<P: Publisher> Relay<P> {
    /// Checks the schema version ([`crate::Admin::check_migrated`]), then
    /// runs until `shutdown` is cancelled, then lets each batch in flight
    /// finish publishing for up to `shutdown_grace` (releasing its claims if
    /// it does not) and settles it before returning. Database and publisher
    /// errors are logged and retried with backoff: the relay does not exit
    /// on a transient fault.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        // Refuse a schema from another build before claiming anything: an
        // older one fails every message, a newer one may mean other things.
        self.store.check_migrated().await?;
        // A schema with lanes (the draft migration 12, docs/design/
        // insert-only.md) is read by a task per lane beside the claim
        // pipelines, which then claim from `retries`.
        let lanes = self.store.lanes();
        let wake = Notify::new();
        let listening = self.config.notify && self.listen.is_some();
        let listener = async {
            if let (true, Some(target)) = (listening, &self.listen) {
                let l = Listen {
                    target: target.clone(),
                    listen: self.store.listen_statement().to_owned(),
                    probe: self.store.notify_probe_statement().to_owned(),
                    deadline: self.config.db_timeout,
                    poll: self.config.idle_sleep,
                };
                listen(l, &wake, &self.read_only, shutdown.clone()).await;
            }
        };
        let hard_stop = CancellationToken::new();
        // With lanes, producers' notifications wake the lanes, and the
        // claim pipelines (on `retries`) are woken by the lanes.
        let claims = Notify::new();
        let pipeline_wake = if lanes { &claims } else { &wake };
        let pipelines = futures_util::future::join_all(
            (0..self.config.concurrency)
                .map(|i| self.pipeline(i, !lanes, pipeline_wake, &shutdown, &hard_stop)),
        );
        let woken = tokio::sync::watch::Sender::new(0u64);
        let lane_tasks = futures_util::future::join_all(
            (0..super::lane::LANES)
                .filter(|_| lanes)
                .map(|l| self.lane_loop(l, &wake, &woken, &claims, &shutdown, &hard_stop)),
        );
        let pipelines = futures_util::future::join(pipelines, lane_tasks);
        let grace = async {
            shutdown.cancelled().await;
            tokio::time::sleep(self.config.shutdown_grace).await;
            tracing::warn!("shutdown grace over: releasing the claims still in flight");
            hard_stop.cancel();
            std::future::pending::<()>().await;
        };
        let work = async {
            tokio::select! {
                _ = pipelines => {}
                _ = grace => {}
            }
        };
        tokio::join!(work, listener, self.maintain(&shutdown));
        self.leave().await;
        Ok(())
    }

    async fn pipeline(
        &self,
        index: usize,
        polls: bool,
        wake: &Notify,
        shutdown: &CancellationToken,
        hard_stop: &CancellationToken,
    ) {
        // Pipeline 0 polls at the poll interval; the others wait to be woken
        // (by a notification, or by a sibling that found a full batch), so
        // an idle relay issues one query per interval however many
        // pipelines it runs. Beside lanes none polls: the lanes wake them.
        let idle = (polls && index == 0).then_some(self.config.idle_sleep);
        let mut failing = Failing::new(index);
        while !shutdown.is_cancelled() {
            if self.breaker.is_open() {
                if !self.wait_for_probe(shutdown).await {
                    break;
                }
                continue;
            }
            let pass = match self.claim_and_publish_until(hard_stop).await {
                Ok(batch) => self.settle(batch).await,
                Err(e) => Err(e),
            };
            let pause = match pass {
                Ok(stats) => {
                    self.read_only.writable();
                    failing.passed();
                    match next(&stats, self.config.batch_size) {
                        Next::ReadOn => continue,
                        Next::More { help } => {
                            tracing::debug!(pipeline = index, %stats, "pass");
                            if help {
                                wake.notify_one();
                            }
                            continue;
                        }
                        Next::Idle => idle,
                    }
                }
                Err(e) => Some(failing.failed(&e, &self.read_only)),
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sleep_for(pause) => {}
                _ = wake.notified() => {}
            }
        }
    }
}

impl<P: Publisher> Relay<P> {
    /// While the breaker is open: sleeps until the probe time, then one
    /// caller probes and the others wait for its result (see breaker.rs).
    /// False when `shutdown` came first.
    pub(super) async fn wait_for_probe(&self, shutdown: &CancellationToken) -> bool {
        let probe = async {
            tokio::time::sleep_until(self.breaker.next_probe()).await;
            self.probe().await;
        };
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = probe => true,
        }
    }
}

/// Sleeps for `pause`, or forever without one (until woken otherwise).
pub(super) async fn sleep_for(pause: Option<Duration>) {
    match pause {
        Some(p) => tokio::time::sleep(p).await,
        None => std::future::pending().await,
    }
}

/// What a pipeline does after a pass that succeeded.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Claim again at once: the pass read a span held back and took
    /// nothing, and the next claim reads past it (bounded: the position
    /// only moves up until a claim reads nothing more); or the next claim
    /// looks back from the floor (bounded: at most every 50 ms, see
    /// cursor.rs).
    ReadOn,
    /// Claim again at once: more is waiting. `help`: get an idle sibling
    /// to help too, unless the batch was one aggregate's (what follows is
    /// likely more of it, which only this pipeline may publish once this
    /// batch is settled).
    More { help: bool },
    /// Wait to be woken (or for the poll interval): nothing was claimed,
    /// or every row claimed had to wait for another chain of its
    /// aggregate (pipelines racing for one busy aggregate), so this
    /// pipeline goes idle rather than claim and release again.
    Idle,
}

/// What follows a pass that did `stats`, claims taking `batch_size` rows
/// at most.
fn next(stats: &PassStats, batch_size: usize) -> Next {
    if stats.read_on {
        Next::ReadOn
    } else if stats.claimed > stats.held_back {
        Next::More {
            help: stats.claimed >= batch_size && stats.aggregates != 1,
        }
    } else {
        Next::Idle
    }
}

/// A pipeline's passes failing: the pause before the next try, doubling
/// up to [`MAX_RETRY_PAUSE`], and a warning at most every
/// [`FAILING_LOG_EVERY`] (at debug level in between).
pub(super) struct Failing {
    pipeline: usize,
    backoff: Duration,
    warned: Option<tokio::time::Instant>,
}

impl Failing {
    pub(super) fn new(pipeline: usize) -> Self {
        Self {
            pipeline,
            backoff: FIRST_RETRY_PAUSE,
            warned: None,
        }
    }

    /// A pass succeeded.
    pub(super) fn passed(&mut self) {
        self.backoff = FIRST_RETRY_PAUSE;
        if self.warned.take().is_some() {
            tracing::info!(pipeline = self.pipeline, "relay pass succeeded again");
        }
    }

    /// A pass failed with `e`: says so, returns the pause before the next.
    pub(super) fn failed(&mut self, e: &crate::Error, read_only: &ReadOnly) -> Duration {
        let now = tokio::time::Instant::now();
        let (pipeline, retry_in) = (self.pipeline, self.backoff);
        if read_only.refused(e) {
            // Said once for the whole relay.
        } else if self.warned.map_or(true, |w| now - w >= FAILING_LOG_EVERY) {
            tracing::warn!(pipeline, error = %crate::error_chain(e), ?retry_in, "relay pass failed");
            self.warned = Some(now);
        } else {
            tracing::debug!(pipeline, error = %crate::error_chain(e), ?retry_in, "relay pass failed");
        }
        self.backoff = (self.backoff * 2).min(MAX_RETRY_PAUSE);
        retry_in
    }
}

/// A pipeline's first pause after a failed pass.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(claimed: usize, held_back: usize, aggregates: usize) -> PassStats {
        PassStats {
            claimed,
            held_back,
            aggregates,
            ..PassStats::default()
        }
    }

    #[test]
    fn a_pass_that_took_rows_claims_again_and_a_full_one_wakes_a_sibling() {
        assert_eq!(next(&stats(3, 0, 2), 10), Next::More { help: false });
        assert_eq!(next(&stats(10, 0, 2), 10), Next::More { help: true });
        // One aggregate's full batch: what follows is likely more of it.
        assert_eq!(next(&stats(10, 0, 1), 10), Next::More { help: false });
    }

    #[test]
    fn a_pass_that_took_nothing_it_may_publish_goes_idle() {
        assert_eq!(next(&stats(0, 0, 0), 10), Next::Idle);
        assert_eq!(next(&stats(4, 4, 1), 10), Next::Idle);
    }

    #[test]
    fn a_pass_that_read_on_claims_again_whatever_it_took() {
        let read_on = PassStats {
            read_on: true,
            ..stats(0, 0, 0)
        };
        assert_eq!(next(&read_on, 10), Next::ReadOn);
    }
}
