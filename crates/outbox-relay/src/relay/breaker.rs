//! The circuit breaker: when the destination is down the relay stops
//! claiming (claims would only be released again), probes the destination
//! with backoff, and resumes by itself. State changes are logged once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Breaker {
    open: AtomicBool,
    state: Mutex<Probe>,
    max_backoff: Duration,
}

#[derive(Debug)]
struct Probe {
    next_at: Instant,
    backoff: Duration,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(250);

impl Breaker {
    pub(crate) fn new(max_backoff: Duration) -> Self {
        crate::metrics::breaker(false);
        Self {
            open: AtomicBool::new(false),
            state: Mutex::new(Probe {
                next_at: Instant::now(),
                backoff: FIRST_BACKOFF,
            }),
            max_backoff,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Opens the breaker (logged only on the change from closed).
    pub(crate) fn trip(&self, publisher: &str, reason: &str) {
        let mut st = self.state.lock().unwrap();
        if !self.open.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                publisher,
                reason,
                "breaker open: destination unreachable, claiming paused"
            );
            st.backoff = FIRST_BACKOFF;
            crate::metrics::breaker(true);
        }
        st.next_at = Instant::now() + st.backoff;
    }

    /// When the next probe is due.
    pub(crate) fn next_probe(&self) -> Instant {
        self.state.lock().unwrap().next_at
    }

    /// Records a probe's result; closes the breaker on success.
    pub(crate) fn probed(&self, publisher: &str, ok: bool) {
        let mut st = self.state.lock().unwrap();
        if ok {
            if self.open.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    publisher,
                    "breaker closed: destination reachable, claiming resumed"
                );
                crate::metrics::breaker(false);
            }
            st.backoff = FIRST_BACKOFF;
        } else {
            st.backoff = (st.backoff * 2).min(self.max_backoff);
            st.next_at = Instant::now() + st.backoff;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_backs_off_and_closes() {
        let b = Breaker::new(Duration::from_secs(1));
        assert!(!b.is_open());
        b.trip("p", "down");
        assert!(b.is_open());
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
}
