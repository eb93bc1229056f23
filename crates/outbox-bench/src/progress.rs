//! How far a running scenario is, for whoever draws a progress bar, and the
//! publisher wrapper that counts what the relay published.

use outbox_relay::{BatchOrder, Message, Outcome, PublishError, Publisher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The phase a scenario is in, its total and how much is done. Scenarios
/// write it; the CLI reads it a few times a second to draw its bar.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    phase: Arc<Mutex<(String, u64)>>,
    done: Arc<Mutex<Arc<AtomicU64>>>,
}

impl Progress {
    /// A new phase of `total` units; returns its counter, which callers
    /// may hand to whatever does the work.
    pub fn start(&self, phase: &str, total: u64) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        *self.phase.lock().expect("progress lock") = (phase.to_owned(), total);
        *self.done.lock().expect("progress lock") = counter.clone();
        counter
    }

    /// Sets the current phase's count.
    pub fn set(&self, n: u64) {
        self.done
            .lock()
            .expect("progress lock")
            .store(n, Ordering::Relaxed);
    }

    /// `(phase, total, done)`.
    pub fn snapshot(&self) -> (String, u64, u64) {
        let (phase, total) = self.phase.lock().expect("progress lock").clone();
        let done = self
            .done
            .lock()
            .expect("progress lock")
            .load(Ordering::Relaxed);
        (phase, total, done)
    }
}

/// A publisher that counts the messages its inner publisher accepted.
#[derive(Debug)]
pub struct Counting<P> {
    inner: P,
    published: Arc<AtomicU64>,
}

impl<P> Counting<P> {
    /// Wraps `inner`, adding each accepted message to `published`.
    pub fn new(inner: P, published: Arc<AtomicU64>) -> Self {
        Self { inner, published }
    }
}

impl<P: Publisher> Publisher for Counting<P> {
    const NAME: &'static str = P::NAME;
    const BATCH_ORDER: BatchOrder = P::BATCH_ORDER;

    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let outcomes = self.inner.publish(batch).await;
        let ok = outcomes.iter().filter(|o| o.is_ok()).count() as u64;
        self.published.fetch_add(ok, Ordering::Relaxed);
        outcomes
    }

    async fn check(&self) -> Result<(), PublishError> {
        self.inner.check().await
    }

    // Forwarded: the default (`Concurrent`) would make an ordered relay
    // publish a batch holding a chain of one aggregate in waves of one
    // message per aggregate, one INSERT per message, where the postgres
    // publisher takes the whole chain in one (`Atomic`). The bench would
    // then measure a relay nobody runs (one aggregate: 0.04x the spread
    // case, against 0.80x for the claim and settle alone).
    fn batch_order(&self) -> BatchOrder {
        self.inner.batch_order()
    }
}
