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
//!
//! The connection is checked: every [`PING_EVERY`] a `SELECT 1` must answer
//! within the database deadline, or the connection is dropped and made
//! again (a partition that drops packets leaves a socket that looks open
//! forever). Once, after the first `LISTEN`, a probe `NOTIFY` is sent from
//! a second connection: when it does not arrive, LISTEN cannot work here
//! (a transaction-mode pooler such as PgBouncer runs `LISTEN` on a server
//! connection that is handed to other clients), and the relay says so; its
//! pipelines poll anyway.

use crate::relay::config::FAILING_LOG_EVERY;
use crate::relay::read_only::ReadOnly;
use futures_util::StreamExt;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

/// How often the LISTEN connection is checked with a round trip.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// How long the start-up probe's notification may take to arrive.
pub const PROBE_WAIT: Duration = Duration::from_secs(2);

/// What the listener needs.
#[derive(Clone)]
pub(crate) struct Listen {
    /// Where, as the relay's own connections.
    pub target: crate::connect::Target,
    /// `LISTEN` on the channel the insert trigger notifies.
    pub listen: String,
    /// `NOTIFY` on that channel with a payload no producer sends (`$1`
    /// is the probe's payload).
    pub probe: String,
    /// Deadline of each round trip ([`crate::RelayConfig::db_timeout`]).
    pub deadline: Duration,
    /// The poll interval, for the warning.
    pub poll: Duration,
}

/// Runs until `shutdown`; wakes one pipeline on every notification.
pub(crate) async fn listen(
    l: Listen,
    wake: &Notify,
    read_only: &ReadOnly,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    let mut warned: Option<tokio::time::Instant> = None;
    let mut probed = false;
    while !shutdown.is_cancelled() {
        match l.target.config.connect(l.target.tls.clone()).await {
            Ok((client, mut conn)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
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
                let listened = tokio::time::timeout(l.deadline, client.batch_execute(&l.listen));
                match listened.await {
                    Err(_) => tracing::warn!(deadline = ?l.deadline, "LISTEN did not answer"),
                    Ok(Err(e)) => {
                        // A standby refuses LISTEN too; the relay says so once.
                        let e = crate::Error::Database(e);
                        if !read_only.refused(&e) {
                            let now = tokio::time::Instant::now();
                            if warned.map_or(true, |w| now - w >= FAILING_LOG_EVERY) {
                                tracing::warn!(error = %crate::error_chain(&e), "LISTEN failed");
                                warned = Some(now);
                            }
                        }
                    }
                    Ok(Ok(())) => {
                        backoff = Duration::from_millis(100);
                        tracing::debug!(listen = %l.listen, "listening for new messages");
                        wake.notify_one();
                        let probe =
                            (!probed).then(|| format!("probe {:016x}", rand::random::<u64>()));
                        probed = true;
                        listening(&l, &client, &mut rx, probe, wake, &shutdown).await;
                    }
                }
                driver.abort();
            }
            Err(e) => {
                // At warning level once in a while: the connection is tried
                // every second or so while the database is down.
                let now = tokio::time::Instant::now();
                if warned.map_or(true, |w| now - w >= FAILING_LOG_EVERY) {
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

/// Turns notifications into wake-ups until the connection fails, stops
/// answering or `shutdown`; with `probe`, first checks that a
/// notification sent from elsewhere arrives.
async fn listening(
    l: &Listen,
    client: &tokio_postgres::Client,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    probe: Option<String>,
    wake: &Notify,
    shutdown: &CancellationToken,
) {
    let probe_until = match &probe {
        Some(payload) => match send_probe(l, payload).await {
            Ok(()) => Some(tokio::time::Instant::now() + PROBE_WAIT),
            Err(e) => {
                tracing::debug!(error = %e, "could not send the LISTEN probe");
                None
            }
        },
        None => None,
    };
    let probe_timer = async {
        match probe_until {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(probe_timer);
    let mut waiting_for_probe = probe_until.is_some();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = rx.recv() => match got {
                Some(payload) => {
                    if waiting_for_probe && probe.as_deref() == Some(payload.as_str()) {
                        waiting_for_probe = false;
                        tracing::debug!("LISTEN works: the probe arrived");
                    }
                    wake.notify_one();
                }
                None => return,
            },
            _ = &mut probe_timer, if waiting_for_probe => {
                waiting_for_probe = false;
                tracing::warn!(
                    poll_interval = ?l.poll,
                    "LISTEN received nothing, though a NOTIFY was sent to it: the server is likely a pooler in transaction mode (PgBouncer), where LISTEN cannot work; the relay polls every poll interval instead; set --notify off to drop this connection"
                );
            }
            _ = ping.tick() => {
                match tokio::time::timeout(l.deadline, client.simple_query("SELECT 1")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %outbox::describe_tokio_postgres(&e), "LISTEN connection failed; reconnecting");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(deadline = ?l.deadline, "LISTEN connection did not answer; reconnecting");
                        return;
                    }
                }
            }
        }
    }
}

/// Sends the probe `NOTIFY` from a connection of its own.
async fn send_probe(l: &Listen, payload: &str) -> crate::Result<()> {
    let send = async {
        let (client, conn) = l.target.config.connect(l.target.tls.clone()).await?;
        let driver = tokio::spawn(conn);
        let sent = client
            .execute_typed(&l.probe, &[(&payload, tokio_postgres::types::Type::TEXT)])
            .await;
        drop(client);
        let _ = driver.await;
        sent.map(drop)
    };
    match tokio::time::timeout(l.deadline, send).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(crate::Error::DatabaseTimeout(l.deadline)),
    }
}
