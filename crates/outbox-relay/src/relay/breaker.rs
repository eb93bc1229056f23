//! The circuit breaker: when the destination is down the relay stops
//! claiming (claims would only be released again), probes the destination
//! with backoff, and resumes by itself. State changes are logged once.
//!
//! Half-open: one probe at a time. Every pipeline notices the outage at
//! once, and N pipelines probing together would hit a destination that is
//! struggling to come back N times per interval; instead the first takes
//! the probe and the others wait for its result, then all resume together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Breaker {
    /// Shared with every [`BreakerView`].
    open: Arc<AtomicBool>,
    /// A check of the destination is in flight (a probe, or settle asking
    /// whether failures mean an outage).
    probing: AtomicBool,
    /// Woken when a check ends, whatever its result.
    probed: Notify,
    state: Mutex<Probe>,
    max_backoff: Duration,
}

#[derive(Debug)]
struct Probe {
    next_at: Instant,
    backoff: Duration,
    /// Why the breaker opened, for rows released while it is open.
    reason: String,
}

/// The right to check the destination, held by one caller at a time;
/// dropping it (even by a panic or a cancelled future) lets the next one in.
#[derive(Debug)]
pub(crate) struct ProbeTurn<'a>(&'a Breaker);

impl Drop for ProbeTurn<'_> {
    fn drop(&mut self) {
        self.0.probing.store(false, Ordering::Release);
        self.0.probed.notify_waiters();
    }
}

/// Whether a relay's circuit breaker is open, readable from anywhere
/// ([`crate::Relay::breaker_view`]): cheap to clone, no lock.
/// The default reads closed: no relay, no breaker.
#[derive(Debug, Clone, Default)]
pub struct BreakerView(Arc<AtomicBool>);

impl BreakerView {
    /// Whether the destination is unreachable and claiming is paused.
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// `now + d`, or a far future instead of panicking when `d` is absurd
/// (a breaker max backoff of years is only a misconfiguration).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

impl Breaker {
    pub(crate) fn new(max_backoff: Duration) -> Self {
        crate::metrics::breaker(false);
        Self {
            open: Arc::new(AtomicBool::new(false)),
            probing: AtomicBool::new(false),
            probed: Notify::new(),
            state: Mutex::new(Probe {
                next_at: Instant::now(),
                backoff: FIRST_BACKOFF,
                reason: String::new(),
            }),
            max_backoff,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Probe> {
        // Plain bookkeeping: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// A handle that reads whether this breaker is open, for those who
    /// only watch it (the operator page).
    pub(crate) fn view(&self) -> BreakerView {
        BreakerView(self.open.clone())
    }

    /// Why the breaker is open (empty when closed).
    pub(crate) fn reason(&self) -> String {
        self.state().reason.clone()
    }

    /// Opens the breaker (logged only on the change from closed).
    pub(crate) fn trip(&self, publisher: &str, reason: &str) {
        let mut st = self.state();
        if !self.open.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                publisher,
                reason,
                "breaker open: destination unreachable, claiming paused"
            );
            st.backoff = FIRST_BACKOFF;
            crate::metrics::breaker(true);
        }
        st.reason = reason.to_owned();
        st.next_at = after(st.backoff);
    }

    /// When the next probe is due.
    pub(crate) fn next_probe(&self) -> Instant {
        self.state().next_at
    }

    /// The turn to check the destination, unless another check is in
    /// flight (then [`Self::wait_probe`] for its result).
    pub(crate) fn try_probe(&self) -> Option<ProbeTurn<'_>> {
        self.probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            // `then`, not `then_some`: a turn built and dropped would free the
            // slot held by the prober.
            .then(|| ProbeTurn(self))
    }

    /// Takes the turn to check the destination, or waits until the check
    /// in flight ends and returns `None`: its result is then in
    /// [`Self::is_open`].
    pub(crate) async fn probe_or_wait(&self) -> Option<ProbeTurn<'_>> {
        // Registered before looking, so an end between the look and the
        // wait is not missed.
        let ended = self.probed.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if let Some(turn) = self.try_probe() {
            return Some(turn);
        }
        ended.await;
        None
    }

    /// Records a probe's result; closes the breaker on success.
    pub(crate) fn probed(&self, publisher: &str, ok: bool) {
        let mut st = self.state();
        if ok {
            if self.open.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    publisher,
                    "breaker closed: destination reachable, claiming resumed"
                );
                crate::metrics::breaker(false);
            }
            st.backoff = FIRST_BACKOFF;
            st.reason.clear();
        } else {
            st.backoff = st.backoff.saturating_mul(2).min(self.max_backoff);
            st.next_at = after(st.backoff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn opens_backs_off_and_closes() {
        let b = Breaker::new(Duration::from_secs(1));
        assert!(!b.is_open());
        b.trip("p", "down");
        assert!(b.is_open());
        assert_eq!(b.reason(), "down");
        let first = b.next_probe();
        b.probed("p", false);
        assert!(b.is_open());
        assert!(b.next_probe() > first);
        for _ in 0..10 {
            b.probed("p", false);
        }
        assert!(b.next_probe() <= Instant::now() + Duration::from_secs(1));
        b.probed("p", true);
        assert!(!b.is_open());
    }

    #[test]
    fn an_absurd_max_backoff_saturates_instead_of_panicking() {
        let b = Breaker::new(Duration::MAX);
        b.trip("p", "down");
        for _ in 0..200 {
            b.probed("p", false);
        }
        assert!(b.next_probe() > Instant::now());
    }

    #[tokio::test]
    async fn one_probe_at_a_time_and_the_others_wait_for_its_result() {
        let b = Arc::new(Breaker::new(Duration::from_secs(1)));
        b.trip("p", "down");
        let turn = b.try_probe().expect("the first caller probes");
        assert!(
            b.try_probe().is_none(),
            "a second probe while one is in flight"
        );
        let waiters = 3;
        let woke = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..waiters)
            .map(|_| {
                let (b, woke) = (b.clone(), woke.clone());
                tokio::spawn(async move {
                    let turn = b.probe_or_wait().await;
                    woke.fetch_add(1, Ordering::SeqCst);
                    (turn.is_some(), b.is_open())
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(woke.load(Ordering::SeqCst), 0, "waiters wait for the probe");
        b.probed("p", true);
        drop(turn);
        for t in tasks {
            let (probed, open) = t.await.unwrap();
            assert!(!probed, "a waiter does not probe again");
            assert!(!open, "and sees the probe's result: closed");
        }
        assert!(b.try_probe().is_some(), "the turn is free again");
    }
}
