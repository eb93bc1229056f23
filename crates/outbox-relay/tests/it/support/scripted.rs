//! A publisher for the ordering tests: the PostgreSQL sink behind a
//! publisher that fails what a test scripts (or a seeded share at random),
//! hangs on request, and logs every message it hands over, in order.

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{BatchOrder, ErrorClass, Message, Outcome, PublishError, Publisher};
use outbox_testkit::TestSchema;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every message handed over for delivery, `(aggregate, id)`, in order.
pub type Log = Arc<Mutex<Vec<(String, i64)>>>;

/// The PostgreSQL sink behind a publisher that keeps batch order
/// (`Sequential` by default) and fails what the test tells it to. After a
/// failure of message k, it sends nothing more of k's aggregate in that
/// batch, as the `Sequential` contract says. Every message it hands to the
/// sink is logged first.
pub struct Scripted {
    inner: PostgresPublisher,
    pub order: BatchOrder,
    /// Message id → (class, failures left).
    fail: Mutex<HashMap<i64, (ErrorClass, u32)>>,
    /// `(seed, percent)`: each attempt of each message fails retryably with
    /// this probability, decided by a hash of (seed, id, attempt).
    pub random: Option<(u64, u64)>,
    /// While set, `publish` does not return (a paused relay).
    pub hang: AtomicBool,
    log: Log,
}

impl Scripted {
    pub fn new(t: &TestSchema, log: &Log) -> Self {
        Self {
            inner: PostgresPublisher::new(t.pool.clone(), &t.schema, "scripted"),
            order: BatchOrder::Sequential,
            fail: Mutex::default(),
            random: None,
            hang: AtomicBool::new(false),
            log: log.clone(),
        }
    }

    pub fn failing(self, id: i64, class: ErrorClass, times: u32) -> Self {
        self.fail.lock().unwrap().insert(id, (class, times));
        self
    }

    fn failure(&self, m: &Message) -> Option<PublishError> {
        if let Some((class, left)) = self.fail.lock().unwrap().get_mut(&m.id) {
            if *left > 0 {
                *left -= 1;
                return Some(match class {
                    ErrorClass::Retryable => PublishError::retryable(format!("injected: {}", m.id)),
                    ErrorClass::Permanent => PublishError::permanent(format!("injected: {}", m.id)),
                });
            }
        }
        let (seed, percent) = self.random?;
        let h = splitmix(seed ^ (m.id as u64).wrapping_mul(0x9E37) ^ ((m.attempts as u64) << 48));
        (h % 100 < percent)
            .then(|| PublishError::retryable(format!("injected at random: {}", m.id)))
    }
}

pub fn aggregate(m: &Message) -> String {
    format!("{}/{}", m.aggregate_type, m.aggregate_id)
}

impl Publisher for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        while self.hang.load(AtomicOrdering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut out: Vec<Outcome> = Vec::with_capacity(batch.len());
        let mut stopped: HashSet<String> = HashSet::new();
        let mut send = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            let agg = aggregate(m);
            if self.order == BatchOrder::Sequential && stopped.contains(&agg) {
                out.push(Err(PublishError::retryable(
                    "not sent: an earlier message of its aggregate failed",
                )));
                continue;
            }
            match self.failure(m) {
                Some(e) => {
                    stopped.insert(agg);
                    out.push(Err(e));
                }
                None => {
                    send.push(i);
                    out.push(Ok(()));
                }
            }
        }
        if send.is_empty() {
            return out;
        }
        let msgs: Vec<Message> = send.iter().map(|&i| batch[i].clone()).collect();
        self.log
            .lock()
            .unwrap()
            .extend(msgs.iter().map(|m| (aggregate(m), m.id)));
        for (i, o) in send.into_iter().zip(self.inner.publish(&msgs).await) {
            out[i] = o;
        }
        out
    }

    async fn check(&self) -> Result<(), PublishError> {
        self.inner.check().await
    }

    fn batch_order(&self) -> BatchOrder {
        self.order
    }
}

/// A 64-bit mix (splitmix64): the seeded randomness of the races.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
