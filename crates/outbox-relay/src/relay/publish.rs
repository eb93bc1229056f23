//! Publishing a claimed batch: the lease kept alive while the publisher
//! works, rows the claim refused failed alone, and the publisher's panics
//! and missed deadlines turned into retryable failures.

use super::Relay;
use crate::publisher::{Accepted, BatchOrder, Publisher};
use crate::store::{Lease, SettleParams};
use crate::{Message, Outcome, PublishError};
use futures_util::FutureExt;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// How long messages the destination accepted wait, while the rest of their
/// batch is still in flight, before they are marked sent on their own: a
/// batch that ends within this costs one settle statement, as ever; only a
/// slow one pays for the early ones.
const EARLY_SETTLE_AFTER: Duration = Duration::from_millis(200);

/// Rows of a batch marked sent while the rest of it was still in flight.
#[derive(Debug, Default)]
pub(super) struct EarlySent {
    /// Marked sent by an early settle that committed.
    pub ids: HashSet<i64>,
    /// An early settle matched fewer rows than it was given: the lease of
    /// some was lost (another relay took them over).
    pub lost: bool,
}

impl<P: Publisher> Relay<P> {
    /// Publishes `messages`, extending their lease every half lease while
    /// the publisher is still busy, so a slow destination does not let a
    /// second relay take the rows over and publish them again. Returns
    /// `None` if `abandon` fired first (the batch is then released).
    ///
    /// `lease` is always the lease the rows hold: an extension runs to its
    /// end once started, since one cancelled after its UPDATE committed
    /// would leave a `locked_at` this relay does not know, and neither the
    /// settle nor the release at shutdown would match the rows any more
    /// (they would sit in `processing` until the reaper).
    ///
    /// Messages the publisher reports accepted before the whole batch is
    /// done ([`Accepted`]) are marked sent on their own once they have
    /// waited [`EARLY_SETTLE_AFTER`], into `early`; the lease of the rest
    /// is kept as before.
    pub(super) async fn publish_keeping_lease(
        &self,
        messages: &[Message],
        refused: &[(i64, String)],
        lease: &mut Lease,
        abandon: &CancellationToken,
        keys: &HashMap<i64, i64>,
        early: &mut EarlySent,
    ) -> Option<Vec<Outcome>> {
        let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel::<i64>();
        let publish = async {
            if let Some(limiter) = &self.limiter {
                if let Some(n) = NonZeroU32::new(messages.len() as u32) {
                    // n never exceeds the burst: the claim was capped above.
                    let _ = limiter.until_n_ready(n).await;
                }
            }
            self.publish_in_waves(messages, refused, keys, &accepted_tx)
                .await
        };
        tokio::pin!(publish);
        let mut ids: Vec<i64> = messages.iter().map(|m| m.id).collect();
        // Accepted, not yet marked sent, and since when.
        let mut waiting: Vec<i64> = Vec::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        // Validation keeps the lease at a second or more; the floor only
        // keeps `interval` from panicking on an unvalidated config.
        let half = (self.config.lease / 2).max(std::time::Duration::from_millis(1));
        let first = tokio::time::Instant::now()
            .checked_add(half)
            .unwrap_or_else(tokio::time::Instant::now);
        let mut tick = tokio::time::interval_at(first, half);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let flush = async {
                match flush_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                o = &mut publish => return Some(o),
                _ = abandon.cancelled() => return None,
                // The extension and the early settle run in the branch's
                // body, where nothing else is polled: shutdown cannot
                // cancel them half-done.
                _ = tick.tick() => self.extend_lease(lease, &ids).await,
                Some(id) = accepted.recv() => {
                    waiting.push(id);
                    flush_at.get_or_insert_with(|| tokio::time::Instant::now() + EARLY_SETTLE_AFTER);
                }
                _ = flush => {
                    flush_at = None;
                    let sent = std::mem::take(&mut waiting);
                    if self.settle_early(lease, &sent, early).await {
                        ids.retain(|id| !early.ids.contains(id));
                    }
                }
            }
        }
    }

    /// Marks `sent` (accepted while the rest of their batch is in flight)
    /// sent under `lease`. Returns whether the statement committed; on an
    /// error they are settled with the rest of the batch.
    async fn settle_early(&self, lease: &Lease, sent: &[i64], early: &mut EarlySent) -> bool {
        let p = SettleParams {
            sent: sent.to_vec(),
            ..SettleParams::default()
        };
        match self.store.settle_messages(lease, &p).await {
            Ok(settled) => {
                if (settled.sent as usize) < sent.len() {
                    early.lost = true;
                    tracing::warn!(
                        lost = sent.len() - settled.sent as usize,
                        "lease lost before settling; another relay owns those rows now"
                    );
                }
                early.ids.extend(sent.iter().copied());
                true
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "could not mark accepted messages sent early; they are settled with their batch");
                false
            }
        }
    }

    async fn extend_lease(&self, lease: &mut Lease, ids: &[i64]) {
        match self.store.extend_lease(lease, ids).await {
            Ok(Some(extended)) => {
                #[cfg(test)]
                self.hooks.after_extend.pass().await;
                *lease = extended;
            }
            Ok(None) => {
                tracing::warn!(
                    "lease lost while publishing; another relay may publish these rows too"
                )
            }
            Err(e) => tracing::warn!(error = %crate::error_chain(&e), "could not extend the lease"),
        }
    }

    /// With ordering on and a publisher that may have several messages in
    /// flight at once ([`BatchOrder::Concurrent`]), publishes in waves: wave
    /// *i* carries the *i*-th message of every aggregate whose earlier ones
    /// succeeded, so two messages of one aggregate are never in flight
    /// together and none goes out after one of its aggregate failed. A
    /// batch of distinct aggregates (the usual case) is one wave.
    pub(super) async fn publish_in_waves(
        &self,
        messages: &[Message],
        refused: &[(i64, String)],
        keys: &HashMap<i64, i64>,
        accepted: &UnboundedSender<i64>,
    ) -> Vec<Outcome> {
        let key = |m: &Message| keys.get(&m.id).copied();
        let repeats = {
            let mut seen = HashSet::new();
            messages.iter().filter_map(key).any(|k| !seen.insert(k))
        };
        if keys.is_empty() || !repeats || self.publisher.batch_order() != BatchOrder::Concurrent {
            return self
                .publish_all_but_refused(messages, refused, accepted)
                .await;
        }
        let mut outcomes: Vec<Option<Outcome>> = vec![None; messages.len()];
        let mut failed: HashSet<i64> = HashSet::new();
        loop {
            // The next message of each aggregate still going, in id order.
            let mut in_wave = HashSet::new();
            let wave: Vec<usize> = (0..messages.len())
                .filter(|&i| outcomes[i].is_none())
                .filter(|&i| {
                    let k = key(&messages[i]);
                    k.map_or(true, |k| !failed.contains(&k) && in_wave.insert(k))
                })
                .collect();
            if wave.is_empty() {
                break;
            }
            let batch: Vec<Message> = wave.iter().map(|&i| messages[i].clone()).collect();
            let results = self
                .publish_all_but_refused(&batch, refused, accepted)
                .await;
            for (&i, o) in wave.iter().zip(results) {
                if o.is_err() {
                    failed.extend(key(&messages[i]));
                }
                outcomes[i] = Some(o);
            }
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(PublishError::retryable(
                        "not published: an earlier message of its aggregate failed",
                    ))
                })
            })
            .collect()
    }

    /// Publishes the messages the claim did not refuse; a refused row (one
    /// that cannot be published as it is) fails alone, as if the
    /// destination had refused it for good, and the rest go out.
    async fn publish_all_but_refused(
        &self,
        messages: &[Message],
        refused: &[(i64, String)],
        accepted: &UnboundedSender<i64>,
    ) -> Vec<Outcome> {
        if refused.is_empty() {
            return self.publish_within_deadline(messages, accepted).await;
        }
        let reason = |id: i64| refused.iter().find(|(r, _)| *r == id).map(|(_, s)| s);
        let publishable: Vec<Message> = messages
            .iter()
            .filter(|m| reason(m.id).is_none())
            .cloned()
            .collect();
        let mut published = if publishable.is_empty() {
            Vec::new()
        } else {
            self.publish_within_deadline(&publishable, accepted).await
        }
        .into_iter();
        messages
            .iter()
            .map(|m| match reason(m.id) {
                Some(why) => Err(PublishError::permanent(why.clone())),
                // publish_within_deadline returns one outcome per message.
                None => published.next().unwrap_or_else(|| {
                    Err(PublishError::retryable(
                        "publisher returned too few outcomes",
                    ))
                }),
            })
            .collect()
    }

    /// The publisher's outcomes, or a retryable failure for every message
    /// when it panics or misses the publish deadline: either way the batch
    /// is retried later and the relay carries on.
    async fn publish_within_deadline(
        &self,
        messages: &[Message],
        accepted: &UnboundedSender<i64>,
    ) -> Vec<Outcome> {
        let started = std::time::Instant::now();
        let name = self.publisher.name();
        let timeout = self.config.publish_timeout;
        let (reports, mut indexes) = Accepted::channel();
        // The call itself inside the async block: a publisher that panics
        // before returning its future is caught too. The reports' sender
        // goes with the future, so the forwarding below ends with it.
        let publish = AssertUnwindSafe(async move {
            let reports = reports;
            self.publisher.publish_reporting(messages, &reports).await
        });
        let forward = |i: usize| {
            if let Some(m) = messages.get(i) {
                let _ = accepted.send(m.id);
            }
        };
        let failed = |e: PublishError| vec![Err(e); messages.len()];
        let publish = tokio::time::timeout(timeout, publish.catch_unwind());
        tokio::pin!(publish);
        let done = loop {
            tokio::select! {
                biased;
                Some(i) = indexes.recv() => forward(i),
                done = &mut publish => break done,
            }
        };
        // What came in with the last outcome; a sender the publisher kept
        // past its return is not waited for.
        while let Ok(i) = indexes.try_recv() {
            forward(i);
        }
        let outcomes = match done {
            Ok(Ok(outcomes)) if outcomes.len() == messages.len() => outcomes,
            // A publisher bug must not mark unpublished rows sent.
            Ok(Ok(outcomes)) => failed(PublishError::retryable(format!(
                "publisher {name} returned {} outcomes for {} messages",
                outcomes.len(),
                messages.len()
            ))),
            Ok(Err(panic)) => {
                let what = panic_message(&*panic);
                tracing::error!(publisher = name, panic = what, "publisher panicked");
                failed(PublishError::retryable(format!(
                    "publisher {name} panicked: {what}"
                )))
            }
            Err(_) => failed(PublishError::retryable(format!(
                "publish timed out after {timeout:?}"
            ))),
        };
        crate::metrics::batch_published(name, messages, &outcomes, started.elapsed());
        outcomes
    }
}

/// What a panic said, if it said it with a string.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
