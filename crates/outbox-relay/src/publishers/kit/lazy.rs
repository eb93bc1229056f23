//! A broker connection opened on first use, not when the publisher is
//! built: a relay started while its broker is down keeps running and
//! reports every message retryable until the broker is back. After a
//! connection error the publisher drops it, and the next call reconnects.

use crate::publishers::kit::outcome::all_failed;
use crate::{Message, Outcome, PublishError};
use std::future::Future;
use tokio::sync::{Mutex, MutexGuard};

/// A connection `T`, or none yet.
pub(crate) struct Lazy<T> {
    slot: Mutex<Option<T>>,
}

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Self {
            slot: Mutex::new(None),
        }
    }
}

impl<T> std::fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.slot.try_lock().map(|s| s.is_some()).ok();
        f.debug_struct("Lazy").field("open", &open).finish()
    }
}

impl<T> Lazy<T> {
    /// Holds the connection for as long as the guard lives: for publishers
    /// whose batch needs the connection to itself (AMQP confirms, MQTT acks
    /// mapped by packet id).
    pub(crate) async fn lock(&self) -> Held<'_, T> {
        Held(self.slot.lock().await)
    }

    /// Forgets the connection (after a connection error): the next call
    /// opens a new one.
    pub(crate) async fn reset(&self) {
        *self.slot.lock().await = None;
    }
}

impl<T: Clone> Lazy<T> {
    /// A handle on the connection, opened by `connect` if there is none,
    /// for clients that multiplex one connection among callers (Redis,
    /// NATS): the lock is not held while the handle is used.
    pub(crate) async fn get<F>(&self, connect: impl FnOnce() -> F) -> Result<T, PublishError>
    where
        F: Future<Output = Result<T, PublishError>>,
    {
        let mut held = self.lock().await;
        held.open(|_| true, connect).await.cloned()
    }
}

/// The connection slot, held.
pub(crate) struct Held<'a, T>(MutexGuard<'a, Option<T>>);

impl<T> Held<'_, T> {
    /// The connection, reopened by `connect` when there is none or `usable`
    /// says the one held was lost (a closed channel, a finished event loop).
    pub(crate) async fn open<F>(
        &mut self,
        usable: impl FnOnce(&mut T) -> bool,
        connect: impl FnOnce() -> F,
    ) -> Result<&mut T, PublishError>
    where
        F: Future<Output = Result<T, PublishError>>,
    {
        if self.0.as_mut().is_some_and(|c| !usable(c)) {
            *self.0 = None;
        }
        if self.0.is_none() {
            *self.0 = Some(connect().await?);
        }
        Ok(self.0.as_mut().expect("opened above"))
    }

    /// Forgets the connection: the next call reconnects.
    pub(crate) fn reset(&mut self) {
        *self.0 = None;
    }
}

/// A publisher whose batch needs its connection to itself (AMQP confirms
/// awaited on one channel, MQTT acks mapped by packet id in send order).
pub(crate) trait Exclusive: Sync {
    /// Its connection.
    type Conn: Send;

    /// Opens a connection.
    async fn connect(&self) -> Result<Self::Conn, PublishError>;

    /// Publishes `batch` on `conn`: the outcomes, and whether `conn` was
    /// lost on the way.
    async fn publish_on(&self, conn: &mut Self::Conn, batch: &[Message]) -> (Vec<Outcome>, bool);
}

/// Publishes `batch` on `p`'s connection kept in `slot`, held for the
/// whole batch and opened first if there is none or `usable` says it was
/// lost (every message fails with the reason if it cannot be). A batch
/// that lost it drops it: what was in flight on it never gets its
/// confirmation, so the next batch starts afresh.
pub(crate) async fn publish_exclusive<P: Exclusive>(
    p: &P,
    slot: &Lazy<P::Conn>,
    usable: impl FnOnce(&mut P::Conn) -> bool,
    batch: &[Message],
) -> Vec<Outcome> {
    let mut held = slot.lock().await;
    let conn = match held.open(usable, || p.connect()).await {
        Ok(conn) => conn,
        Err(e) => return all_failed(batch.len(), e),
    };
    let (outcomes, lost) = p.publish_on(conn, batch).await;
    if lost {
        held.reset();
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connects_once_and_again_after_a_reset_or_a_loss() {
        let lazy: Lazy<u32> = Lazy::default();
        let mut opened = 0;
        let mut connect = || {
            opened += 1;
            let n = opened;
            async move { Ok(n) }
        };
        assert_eq!(lazy.get(&mut connect).await.unwrap(), 1);
        assert_eq!(lazy.get(&mut connect).await.unwrap(), 1);
        lazy.reset().await;
        assert_eq!(lazy.get(&mut connect).await.unwrap(), 2);
        let mut held = lazy.lock().await;
        assert_eq!(*held.open(|n| *n != 2, &mut connect).await.unwrap(), 3);
        held.reset();
        let failed = held
            .open(|_| true, || async { Err(PublishError::retryable("down")) })
            .await;
        assert!(failed.is_err_and(|e| e.is_retryable()));
    }
}
