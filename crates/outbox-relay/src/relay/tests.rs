//! Races inside the relay, forced rather than hoped for: [`Hooks`] stop a
//! relay at one exact point while the test does something else.

use super::{Relay, RelayConfig, MIN_LEASE};
use crate::publishers::postgres::PostgresPublisher;
use crate::{Message, Outcome, PublishError, Publisher, Store};
use outbox::{NewMessage, Outbox};
use outbox_testkit::TestSchema;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Points where a test can hold a relay.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    /// Just before the settle statement is sent.
    pub(crate) before_settle: Gate,
    /// After a lease extension committed, before the relay records it.
    pub(crate) after_extend: Gate,
}

/// Once armed, stops the next relay that passes until the test opens it.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    armed: AtomicBool,
    reached: Notify,
    open: Notify,
}

impl Gate {
    pub(crate) async fn pass(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.reached.notify_one();
            self.open.notified().await;
        }
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    async fn reached(&self) {
        self.reached.notified().await;
    }

    fn open(&self) {
        self.open.notify_one();
    }
}

/// The real sink, or, while `down`, a destination that refuses every
/// message and fails its health check.
struct Switch {
    inner: PostgresPublisher,
    down: AtomicBool,
}

impl Publisher for Switch {
    fn name(&self) -> &str {
        "switch"
    }
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if self.down.load(Ordering::SeqCst) {
            return vec![Err(PublishError::retryable("down")); batch.len()];
        }
        self.inner.publish(batch).await
    }
    async fn check(&self) -> Result<(), PublishError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PublishError::retryable("down"));
        }
        self.inner.check().await
    }
}

/// A destination that never answers.
struct Hang;

impl Publisher for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    async fn publish(&self, _: &[Message]) -> Vec<Outcome> {
        std::future::pending().await
    }
    async fn check(&self) -> Result<(), PublishError> {
        Ok(())
    }
}

fn sink(t: &TestSchema) -> PostgresPublisher {
    PostgresPublisher::new(t.pool.clone(), &t.schema, "test")
}

fn relay<P: Publisher>(t: &TestSchema, publisher: P, config: RelayConfig) -> Relay<P> {
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
}

async fn enqueue(t: &TestSchema) -> i64 {
    let client = t.pool.get().await.unwrap();
    let m = NewMessage::new("e", "a", "1", &serde_json::json!({})).unwrap();
    Outbox::with_schema(t.schema.clone())
        .enqueue(&**client, &m)
        .await
        .unwrap()
        .id
}

#[tokio::test]
async fn a_release_is_not_hidden_by_claims_made_before_it_committed() {
    let t = TestSchema::new("race_rewind").await;
    let x = enqueue(&t).await;
    let r = relay(
        &t,
        Switch {
            inner: sink(&t),
            down: AtomicBool::new(true),
        },
        RelayConfig {
            batch_size: 1,
            // No sweep during the test: only the floor decides what is seen.
            sweep_interval: Duration::from_secs(3600),
            // Every row is of one aggregate: with order kept, the released
            // row would (rightly) hold back all the others.
            ordering: super::Ordering::None,
            ..RelayConfig::default()
        },
    );
    let failed = r.claim_and_publish().await.unwrap();
    assert_eq!(failed.claimed(), 1);
    r.hooks.before_settle.arm();
    let settling = r.settle(failed);
    let siblings = async {
        // The settle is about to release row x, but has not sent its
        // statement: x is still `processing`. A sibling pipeline claims
        // the rows after it until the floor moves past x.
        r.hooks.before_settle.reached().await;
        r.publisher.down.store(false, Ordering::SeqCst);
        // Other sessions' transactions on the server hold the floor back
        // for as long as they run: wait for it, within reason.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while r.cursor().floor() <= x {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the floor never passed row {x}"
            );
            enqueue(&t).await;
            let b = r.claim_and_publish().await.unwrap();
            assert!(b.messages.iter().all(|m| m.id != x));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        r.hooks.before_settle.open();
    };
    let (settled, ()) = tokio::join!(settling, siblings);
    assert_eq!(settled.unwrap().released, 1);
    let next = r.claim_and_publish().await.unwrap();
    assert_eq!(
        next.messages.iter().map(|m| m.id).collect::<Vec<_>>(),
        [x],
        "the released row is claimable at once, not after the next sweep"
    );
}

#[tokio::test]
async fn shutdown_during_a_lease_extension_still_releases_the_batch() {
    let t = TestSchema::new("race_extend").await;
    enqueue(&t).await;
    enqueue(&t).await;
    let r = relay(
        &t,
        Hang,
        RelayConfig {
            lease: MIN_LEASE,
            ..RelayConfig::default()
        },
    );
    r.hooks.after_extend.arm();
    let abandon = CancellationToken::new();
    let publishing = r.claim_and_publish_until(&abandon);
    let shutdown = async {
        // The extension has committed a new locked_at; shutdown comes
        // before the relay has read the answer.
        r.hooks.after_extend.reached().await;
        abandon.cancel();
        // Let the publishing side see the cancellation while the
        // extension is still held.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        r.hooks.after_extend.open();
    };
    let (batch, ()) = tokio::join!(publishing, shutdown);
    let batch = batch.unwrap();
    assert_eq!(batch.claimed(), 2);
    let stats = r.settle(batch).await.unwrap();
    assert_eq!(stats.released, 2, "the release matched the extended lease");
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'pending' AND locked_by IS NULL"
        )
        .await,
        2
    );
}
