//! LISTEN for the producers' NOTIFY on a connection of its own, and turn
//! each notification into a wake-up of the relay's pipelines.
//!
//! A [`Notify`] carries the wake-ups: each notification wakes one waiting
//! pipeline (the others stay asleep rather than race for the same rows and
//! come back empty); if every pipeline is busy it is kept until one next
//! waits, so none is lost between passes, and any number of notifications
//! collapse into one wake-up. The connection is re-established with backoff; after each
//! (re)connect the pipelines are woken once, to pick up whatever committed
//! while nobody was listening.

use futures_util::StreamExt;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

/// Runs until `shutdown`; wakes one pipeline on every notification. `listen` is
/// the `LISTEN` statement (`Store::listen_statement`).
pub(crate) async fn listen(
    target: crate::connect::Target,
    listen: String,
    wake: &Notify,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    let mut warned: Option<tokio::time::Instant> = None;
    while !shutdown.is_cancelled() {
        match target.config.connect(target.tls.clone()).await {
            Ok((client, mut conn)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(AsyncMessage::Notification(_)) => {
                                if tx.send(()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %crate::error_chain(&e), "LISTEN connection lost");
                                break;
                            }
                        }
                    }
                });
                if let Err(e) = client.batch_execute(&listen).await {
                    tracing::warn!(error = %outbox::describe_tokio_postgres(&e), "LISTEN failed");
                } else {
                    backoff = Duration::from_millis(100);
                    tracing::debug!(%listen, "listening for new messages");
                    wake.notify_one();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            got = rx.recv() => match got {
                                Some(()) => wake.notify_one(),
                                None => break,
                            },
                        }
                    }
                }
                driver.abort();
            }
            Err(e) => {
                // At warning level once in a while: the connection is tried
                // every second or so while the database is down.
                let now = tokio::time::Instant::now();
                if warned.map_or(true, |w| now - w >= crate::relay::config::FAILING_LOG_EVERY) {
                    tracing::warn!(error = %outbox::describe_tokio_postgres(&e), retry_in = ?backoff, "cannot connect to LISTEN");
                    warned = Some(now);
                } else {
                    tracing::debug!(error = %outbox::describe_tokio_postgres(&e), retry_in = ?backoff, "cannot connect to LISTEN");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(crate::relay::config::MAX_RETRY_PAUSE);
    }
}
