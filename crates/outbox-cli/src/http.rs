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
use outbox_relay::{Admin, Publisher, Store};
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
/// The page's event streams have a lower cap of their own
/// (`ui::MAX_STREAMS`), so probes always find room.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections of the operator page's own pool: its queries (a viewer's
/// filter over the dead letters, the snapshot) never take the relay's
/// connections. Forty viewers filtering once stalled delivery from 0.06 s
/// to 43 s on the shared pool.
pub const PAGE_POOL: usize = 2;
/// A page query running longer than this is cancelled by PostgreSQL
/// (`statement_timeout`) and the page shows the error.
pub const PAGE_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// A page request waits this long for one of [`PAGE_POOL`]'s connections,
/// then shows an error instead of queueing without end.
pub const PAGE_POOL_WAIT: Duration = Duration::from_secs(5);

/// `application_name` of the page's connections, before the schema's name.
pub const PAGE_APPLICATION_NAME: &str = "outbox operator page";

/// A store for the operator page over its own small pool: [`PAGE_POOL`]
/// connections, each with [`PAGE_STATEMENT_TIMEOUT`]. Connects lazily.
pub fn page_store(url: &str, schema: outbox::Schema) -> anyhow::Result<Store> {
    // Named, so pg_stat_activity tells the page's sessions apart (which
    // schema's page; PostgreSQL keeps the first 63 bytes); TLS as the relay.
    let mut target = outbox_relay::connect::target(url)
        .context("bad database URL for the operator page's pool")?
        .named(&format!("{PAGE_APPLICATION_NAME} {}", schema.name()));
    // The URL's own options (a search_path, say) are kept.
    let options = format!(
        "{} -c statement_timeout={}",
        target.config.get_options().unwrap_or(""),
        PAGE_STATEMENT_TIMEOUT.as_millis()
    );
    target.config.options(options.trim());
    let mut pool = deadpool_postgres::PoolConfig::new(PAGE_POOL);
    pool.timeouts.wait = Some(PAGE_POOL_WAIT);
    pool.timeouts.create = Some(PAGE_POOL_WAIT);
    let pool = outbox_relay::pool_configured(target, pool)
        .context("cannot make the operator page's pool")?;
    Ok(Store::new(pool, schema))
}

/// How the relay serves its operator page.
#[derive(Debug, Clone, Default)]
pub struct PageSetup {
    /// `OUTBOX_UI_TOKEN`: actions (and, beyond loopback, reading) need it.
    pub token: Option<String>,
    /// The outbox database, for the page's own pool ([`page_store`]).
    pub database_url: String,
    /// `ui_allowed_hosts`.
    pub allowed_hosts: Vec<String>,
    /// The relay's breaker, which the page shows.
    pub breaker: outbox_relay::relay::BreakerView,
}

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
    admin: Admin,
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
            admin: Admin::new(store),
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
                match tokio::time::timeout(PROBE_TIMEOUT, self.admin.ping()).await {
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
/// is served at `/` over its own pool ([`page_store`]), with actions if
/// `page.token` is set. `/metrics`, `/healthz` and `/readyz` answer any
/// `Host` (a Prometheus server or a kubelet names the relay by IP, and
/// they show no producer data); the page answers only its own names.
pub async fn bind(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    probes: Probes,
    page: PageSetup,
    shutdown: CancellationToken,
) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let ui_token = page.token;
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
    let page_store = if ui_token.is_some() || !beyond {
        Some(page_store(
            &page.database_url,
            probes.admin.schema().clone(),
        )?)
    } else {
        None
    };
    let allowed_hosts = page.allowed_hosts;
    let page = page_store.map(|page_store| {
        let breaker_source = {
            let view = page.breaker.clone();
            Arc::new(move || Some(view.is_open())) as crate::ui::BreakerSource
        };
        crate::ui::router(
            page_store,
            crate::ui::Options {
                token: ui_token,
                private: beyond,
                interval: crate::ui::DEFAULT_INTERVAL,
                breaker: Some(breaker_source),
                allowed_hosts,
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
/// Accepts connections until `shutdown`, each served by hyper with
/// [`HEADER_READ_TIMEOUT`] and [`MAX_CONNECTION_AGE`], at most
/// [`MAX_CONNECTIONS`] at once. (`axum::serve` has neither timeout nor limit.)
/// Each request carries its peer's address (`ConnectInfo`), which the
/// operator page's audit lines name.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    // A handler that panics answers 500 and the server keeps serving; the
    // panic is logged. (Without it hyper drops the connection, and a panic
    // outside a connection's task ended the whole server.)
    let app = app.layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked));
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

/// The answer to a request whose handler panicked.
fn panicked(e: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    let what = e
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| e.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!(panic = %what, "an HTTP handler panicked; answered 500");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "500: internal error (logged); the server keeps serving\n",
    )
        .into_response()
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
