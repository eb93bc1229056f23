//! The relay's HTTP side (`--metrics-addr`): `/metrics` in Prometheus text
//! format, `/healthz` (the process answers), `/readyz` (the database and
//! the publisher both answer) and the operator page at `/` (`crate::ui`).
//! [`serve`], with its connection limit and timeouts, serves `outbox ui` too.

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use outbox_relay::metrics as m;
use outbox_relay::publishers::AnyPublisher;
use outbox_relay::{Publisher, Store};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A readiness answer is reused this long, so a storm of probes (several
/// kubelets, a load balancer, a human with `watch curl`) costs the
/// database one round trip per second at most.
const READY_CACHE: Duration = Duration::from_secs(1);
/// A probe that does not answer within this is a failed probe: a hung
/// database must turn the relay unready, not hang the prober.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the exporter drops stale histogram samples.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// A client must send a request's headers within this, and an idle
/// keep-alive connection is closed after it: a slowloris client (one header
/// byte a second) or a pile of idle sockets cannot hold connections open.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// No connection lives longer than this, whatever it does (a client that
/// reads its response one byte at a time); a scraper reconnects.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);
/// Connections served at once; further ones wait in the listen backlog
/// until one closes, so a flood costs file descriptors up to this bound.
pub const MAX_CONNECTIONS: usize = 256;

/// Installs the process-wide Prometheus recorder, with histogram buckets for
/// the relay's histograms (summaries would not aggregate across relays).
pub fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in [
        (m::PUBLISH_DURATION, m::SECONDS_BUCKETS),
        (m::COMMIT_TO_PUBLISH, m::SECONDS_BUCKETS),
        (m::CLAIM_BATCH_SIZE, m::BATCH_BUCKETS),
    ] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    let handle = builder
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    m::describe();
    Ok(handle)
}

/// What `/readyz` checks.
#[derive(Debug)]
pub struct Probes {
    store: Store,
    publisher: Arc<AnyPublisher>,
    last: Mutex<Option<(Instant, Readiness)>>,
}

#[derive(Debug, Clone)]
struct Readiness {
    database: Result<(), String>,
    publisher: Result<(), String>,
}

impl Readiness {
    fn ready(&self) -> bool {
        self.database.is_ok() && self.publisher.is_ok()
    }

    fn body(&self) -> serde_json::Value {
        let show = |r: &Result<(), String>| match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.clone(),
        };
        serde_json::json!({
            "status": if self.ready() { "ready" } else { "unavailable" },
            "database": show(&self.database),
            "publisher": show(&self.publisher),
        })
    }
}

impl Probes {
    /// Probes over the relay's store and publisher.
    pub fn new(store: Store, publisher: Arc<AnyPublisher>) -> Self {
        Self {
            store,
            publisher,
            last: Mutex::new(None),
        }
    }

    async fn readiness(&self) -> Readiness {
        // Holding the lock across the probe makes concurrent requests wait
        // for one probe instead of each starting its own.
        let mut last = self.last.lock().await;
        if let Some((at, r)) = last.as_ref() {
            if at.elapsed() < READY_CACHE {
                return r.clone();
            }
        }
        let timed = |what: &str| format!("no answer within {PROBE_TIMEOUT:?} ({what})");
        let (database, publisher) = tokio::join!(
            async {
                match tokio::time::timeout(PROBE_TIMEOUT, self.store.ping()).await {
                    Ok(r) => r.map_err(|e| outbox_relay::error_chain(&e)),
                    Err(_) => Err(timed("database")),
                }
            },
            async {
                match tokio::time::timeout(PROBE_TIMEOUT, self.publisher.check()).await {
                    Ok(r) => r.map_err(|e| e.message),
                    Err(_) => Err(timed(self.publisher.name())),
                }
            }
        );
        let r = Readiness {
            database,
            publisher,
        };
        if !r.ready() {
            tracing::debug!(body = %r.body(), "not ready");
        }
        *last = Some((Instant::now(), r.clone()));
        r
    }
}

#[derive(Clone)]
struct AppState {
    metrics: PrometheusHandle,
    probes: Arc<Probes>,
}

/// Binds `addr` now, so a taken port fails the start with one clear line,
/// and returns the server, which runs until `shutdown`. The operator page
/// is served at `/` over `store`, with actions if `ui_token` is set.
pub async fn bind(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    probes: Probes,
    ui_token: Option<String>,
    shutdown: CancellationToken,
) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot serve metrics on {addr}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    let upkeep = {
        let handle = metrics.clone();
        let stop = shutdown.clone();
        async move {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => handle.run_upkeep(),
                }
            }
        }
    };
    let beyond = !bound.ip().is_loopback();
    // The page shows producers' payloads and errors: beyond loopback it is
    // served only with a token, which reading then needs too. A relay whose
    // metrics port is open to scrapers does not start showing them.
    let page_mode = match (&ui_token, beyond) {
        (None, true) => "off: beyond this host it needs OUTBOX_UI_TOKEN",
        (None, false) => "read-only (no OUTBOX_UI_TOKEN)",
        (Some(_), true) => "token needed to read and act",
        (Some(_), false) => "actions with OUTBOX_UI_TOKEN",
    };
    let page = (ui_token.is_some() || !beyond).then(|| {
        let breaker_source = {
            let handle = metrics.clone();
            Arc::new(move || breaker_open(&handle.render())) as crate::ui::BreakerSource
        };
        crate::ui::router(
            probes.store.clone(),
            crate::ui::Options {
                token: ui_token,
                private: beyond,
                interval: crate::ui::DEFAULT_INTERVAL,
                breaker: Some(breaker_source),
            },
            shutdown.clone(),
        )
    });
    let mut app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(AppState {
            metrics,
            probes: Arc::new(probes),
        });
    let snapshots = page.map(|(router, task)| {
        app = std::mem::take(&mut app).merge(router);
        task
    });
    if beyond {
        tracing::warn!(
            addr = %bound,
            "the metrics server listens beyond this host: /metrics and /readyz are served \
             without authentication to anyone who can reach {bound}; bind 127.0.0.1 unless \
             a scraper elsewhere needs it, and firewall it"
        );
    }
    tracing::info!(
        addr = %bound,
        operator_page = page_mode,
        "serving /metrics, /healthz, /readyz and the operator page at /"
    );
    let snapshots = async move {
        if let Some(task) = snapshots {
            task.await;
        }
    };
    Ok(async move {
        tokio::join!(serve(listener, app, shutdown), upkeep, snapshots);
    })
}

/// The breaker gauge in the exporter's text: `Some(true)` while open,
/// `None` before the relay has set it.
fn breaker_open(text: &str) -> Option<bool> {
    text.lines()
        .find_map(|l| l.strip_prefix(m::BREAKER_OPEN)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v > 0.0)
}

/// Accepts connections until `shutdown`, each served by hyper with
/// [`HEADER_READ_TIMEOUT`] and [`MAX_CONNECTION_AGE`], at most
/// [`MAX_CONNECTIONS`] at once. (`axum::serve` has neither timeout nor limit.)
/// Each request carries its peer's address (`ConnectInfo`), which the
/// operator page's audit lines name.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(64 * 1024);
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let (socket, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, mostly: wait rather than spin.
                    tracing::warn!(error = %e, "metrics server cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let service = hyper_util::service::TowerToHyperService::new(tower::service_fn(
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                tower::ServiceExt::oneshot(app.clone(), req)
            },
        ));
        let conn = http.serve_connection(hyper_util::rt::TokioIo::new(socket), service);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
            }
            // Finish the request in flight, if any, but not for long.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(HEADER_READ_TIMEOUT, conn).await;
        });
    }
    // Every connection holds a permit until it ends: all of them back means
    // every connection has finished (each within HEADER_READ_TIMEOUT of
    // the shutdown).
    let _ = permits.acquire_many(MAX_CONNECTIONS as u32).await;
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
}

async fn ready(State(s): State<AppState>) -> impl IntoResponse {
    let r = s.probes.readiness().await;
    let code = if r.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        r.body().to_string(),
    )
}
