//! The long-running relay: `concurrency` pipelines of claim → publish →
//! settle, woken by NOTIFY (or the poll interval), the maintenance beside
//! them (`maintain.rs`), the breaker pausing claims while the destination
//! is down, and a shutdown that finishes or releases the batches in flight.

use super::Relay;
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
        let pipelines = futures_util::future::join_all(
            (0..self.config.concurrency).map(|i| self.pipeline(i, &wake, &shutdown, &hard_stop)),
        );
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
        wake: &Notify,
        shutdown: &CancellationToken,
        hard_stop: &CancellationToken,
    ) {
        // Pipeline 0 polls at the poll interval; the others wait to be woken
        // (by a notification, or by a sibling that found a full batch), so
        // an idle relay issues one query per interval however many
        // pipelines it runs.
        let idle = (index == 0).then_some(self.config.idle_sleep);
        let mut error_backoff = Duration::from_millis(100);
        let mut warned: Option<tokio::time::Instant> = None;
        while !shutdown.is_cancelled() {
            if self.breaker.is_open() {
                // Every pipeline wakes at the probe time; one probes and the
                // others wait for its result (see breaker.rs).
                let probe = async {
                    tokio::time::sleep_until(self.breaker.next_probe()).await;
                    self.probe().await;
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = probe => {}
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
                    error_backoff = Duration::from_millis(100);
                    if warned.take().is_some() {
                        tracing::info!(pipeline = index, "relay pass succeeded again");
                    }
                    // Read a span held back and took nothing: the next
                    // claim reads past it (bounded: the position only
                    // moves up until a claim reads nothing more). Or the
                    // next claim looks back from the floor (bounded: at
                    // most every 50 ms, see cursor.rs).
                    if stats.read_on {
                        continue;
                    }
                    // A claim whose every row had to wait for another
                    // chain of its aggregate (pipelines racing for one busy
                    // aggregate) found nothing this pipeline may publish:
                    // it goes idle rather than claim and release again.
                    if stats.claimed > stats.held_back {
                        tracing::debug!(pipeline = index, %stats, "pass");
                        // More is waiting: get an idle sibling to help, unless
                        // the batch was one aggregate's (what follows is
                        // likely more of it, which only this pipeline may
                        // publish once this batch is settled).
                        if stats.claimed >= self.config.batch_size && stats.aggregates != 1 {
                            wake.notify_one();
                        }
                        continue;
                    }
                    idle
                }
                Err(e) => {
                    let now = tokio::time::Instant::now();
                    if self.read_only.refused(&e) {
                        // Said once for the whole relay.
                    } else if warned.map_or(true, |w| now - w >= super::config::FAILING_LOG_EVERY) {
                        tracing::warn!(pipeline = index, error = %crate::error_chain(&e), retry_in = ?error_backoff, "relay pass failed");
                        warned = Some(now);
                    } else {
                        tracing::debug!(pipeline = index, error = %crate::error_chain(&e), retry_in = ?error_backoff, "relay pass failed");
                    }
                    let pause = error_backoff;
                    error_backoff = (error_backoff * 2).min(super::config::MAX_RETRY_PAUSE);
                    Some(pause)
                }
            };
            let sleep = async {
                match pause {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sleep => {}
                _ = wake.notified() => {}
            }
        }
    }
}
