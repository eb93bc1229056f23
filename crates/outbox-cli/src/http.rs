//! The relay's HTTP side (`--metrics-addr`): `/metrics` in Prometheus text
//! format, `/healthz` (the process answers) and `/readyz` (the database and
//! the publisher both answer).

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
                    Ok(r) => r.map_err(|e| e.to_string()),
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
/// and returns the server, which runs until `shutdown`.
pub async fn bind(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    probes: Probes,
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
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(AppState {
            metrics,
            probes: Arc::new(probes),
        });
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        let (served, ()) = tokio::join!(serve, upkeep);
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server stopped");
        }
    })
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
