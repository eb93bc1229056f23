//! The operator page (`outbox ui`, and `/` of the relay's `--metrics-addr`
//! server): counts, throughput, relays and dead letters, live over
//! Server-Sent Events, with replay and purge behind a token.
//!
//! Layout: `snapshot` computes what every viewer sees, once per interval,
//! and fans it out over a watch channel; `page` renders HTML with maud,
//! which escapes every value (nothing from the database reaches the page
//! unescaped); `auth` decides who may act; `actions` replays and purges
//! through [`outbox_relay::DeadLetters`]. The page's few lines of script
//! and its stylesheet are compiled in (`assets/`).

mod actions;
mod auth;
mod page;
mod snapshot;

pub use snapshot::BreakerSource;

use auth::Auth;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use outbox_relay::{Admin, DeadLetters, Store};
use snapshot::Snapshot;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

/// The snapshot interval unless told otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// Dead letters in the live list (the newest).
const LIVE_DEAD: i64 = 50;
/// How soon a browser reconnects its event stream (the server ends every
/// connection after `http::MAX_CONNECTION_AGE`); EventSource's own default
/// is a few seconds.
const RECONNECT: Duration = Duration::from_secs(1);
/// Dead letters a filtered list shows.
const FILTERED_DEAD: i64 = 200;
/// Bytes shown of a name a producer or relay chose (topic, event type,
/// relay id, who replayed): longer ones are cut with a marker. A topic of
/// 1 MiB once made one page view 200 MiB.
pub(crate) const SHOWN_TEXT: usize = 200;
/// Bytes shown of a reason or error in a list.
pub(crate) const SHOWN_REASON: usize = 500;
/// Bytes shown of one field of a dead letter's own page (payload, headers,
/// last error).
pub(crate) const SHOWN_FIELD: usize = 64 * 1024;
/// Topics listed by the page, the ones with the most rows; the rest are
/// counted in the totals and said to be left out.
pub(crate) const MAX_TOPICS: usize = 100;
/// Relays listed by the page.
pub(crate) const MAX_RELAYS: usize = 50;
/// Event streams open at once; one more is answered 503. Streams live
/// long, and all of them together stay well under the server's connection
/// cap (`http::MAX_CONNECTIONS`), so `/healthz` and `/readyz` always have
/// room: 260 open streams once starved the probes and got a healthy relay
/// restarted.
pub const MAX_STREAMS: usize = 64;

/// How the page is served.
#[derive(Clone)]
pub struct Options {
    /// The token actions need; `None` serves the page read-only.
    pub token: Option<String>,
    /// Reading needs the token too (a page beyond loopback with a token).
    pub private: bool,
    /// At most one snapshot per this.
    pub interval: Duration,
    /// Where the breaker's state comes from, when the page runs inside a
    /// relay; `None` shows it as unknown.
    pub breaker: Option<BreakerSource>,
    /// Names answered in `Host` besides IP addresses and `localhost`
    /// (lowercase, no port).
    pub allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.debug_struct("Options")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("private", &self.private)
            .field("interval", &self.interval)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// The page's shared state.
#[derive(Clone)]
struct Ui {
    inner: Arc<Inner>,
}

struct Inner {
    admin: Admin,
    dead: DeadLetters,
    auth: Auth,
    snapshots: watch::Sender<Arc<Snapshot>>,
    /// Rings the snapshot task when a viewer arrives while it idles.
    wake: Notify,
    interval: Duration,
    /// Reading needs the token (see [`Options::private`]).
    private: bool,
    /// Ends the event streams too: a graceful shutdown would otherwise
    /// wait on them.
    shutdown: CancellationToken,
    /// One permit per open event stream ([`MAX_STREAMS`]).
    streams: Arc<tokio::sync::Semaphore>,
}

/// The page's routes, and the task that computes its snapshots; the task
/// runs until `shutdown` and queries only while someone watches.
pub fn router(
    store: Store,
    options: Options,
    shutdown: CancellationToken,
) -> (Router, impl std::future::Future<Output = ()>) {
    let (tx, _) = watch::channel(Arc::new(Snapshot::empty()));
    let ui = Ui {
        inner: Arc::new(Inner {
            dead: DeadLetters::new(store.clone()),
            admin: Admin::new(store),
            auth: Auth::new(options.token.clone()),
            snapshots: tx,
            wake: Notify::new(),
            interval: options.interval,
            private: options.private && options.token.is_some(),
            shutdown: shutdown.clone(),
            streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
        }),
    };
    let task = snapshot::run(ui.clone(), options.breaker, page::event_json, shutdown);
    let allowed = Arc::new(options.allowed_hosts);
    let app = Router::new()
        .route("/", get(index))
        .route("/events", get(events))
        .route("/dead/{id}", get(detail))
        .route("/assets/ui.js", get(script))
        .route("/assets/ui.css", get(stylesheet))
        .route("/login", post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/replay", post(actions::replay))
        .route("/replay-matching", post(actions::replay_matching))
        .route("/purge", post(actions::purge))
        .layer(axum::middleware::map_response(security_headers))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let allowed = allowed.clone();
                async move {
                    let host = req
                        .headers()
                        .get(header::HOST)
                        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
                    if host.is_some_and(|h| !host_allowed(h, &allowed)) {
                        return (
                            StatusCode::MISDIRECTED_REQUEST,
                            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                            "421: this page answers only its own address, localhost or a name \
                             given in ui_allowed_hosts (a name elsewhere could be DNS rebinding)\n",
                        )
                            .into_response();
                    }
                    next.run(req).await
                }
            },
        ))
        .with_state(ui);
    (app, task)
}

/// Whether the page answers a request for `host` (a `Host` header): an IP
/// address (any port), `localhost`, or one of `allowed`. A web site that
/// points its own name at 127.0.0.1 (DNS rebinding) gets its name in
/// `Host`, so its script cannot read the page, its event stream or a dead
/// letter's payload. An IP literal cannot be rebound: it names the address
/// itself. A request without `Host` (HTTP/1.0) comes from no browser and is
/// served.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [::1]:9091
        match rest.split_once(']') {
            Some((ip, _)) => return ip.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok() || name == "localhost" || allowed.contains(&name)
}

/// What every response of the page carries: scripts only from the page's
/// own origin (an injected `<script>` would not run even if it got past
/// the escaping), never framed (no clickjacking of the buttons), no
/// referrer leaving it.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

/// `key=value` pairs of a query string or form body.
fn pairs(raw: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(raw.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The first non-blank value of `key`, trimmed.
fn field(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(k, v)| k == key && !v.trim().is_empty())
        .map(|(_, v)| v.trim().to_owned())
}

impl Ui {
    /// Whether this request may see the page's data.
    fn may_read(&self, headers: &HeaderMap) -> bool {
        !self.inner.private || self.inner.auth.may_read(headers)
    }

    /// A snapshot at most two intervals old: the current one, or (when the
    /// task has been idle) the next, which arriving here asks for.
    async fn fresh_snapshot(&self) -> Arc<Snapshot> {
        let current = self.inner.snapshots.borrow().clone();
        if current.seq > 0 && current.age() < 2 * self.inner.interval {
            return current;
        }
        // Holding a receiver is what tells the task someone watches.
        let mut rx = self.inner.snapshots.subscribe();
        self.inner.wake.notify_one();
        let seq = current.seq;
        let waited = tokio::time::timeout(
            self.inner.interval + Duration::from_secs(10),
            rx.wait_for(|s| s.seq > seq),
        )
        .await;
        match waited {
            Ok(Ok(s)) => s.clone(),
            _ => current,
        }
    }
}

async fn index(State(ui): State<Ui>, RawQuery(q): RawQuery, headers: HeaderMap) -> Response {
    if !ui.may_read(&headers) {
        return page::html(
            StatusCode::OK,
            page::sign_in_only(ui.inner.admin.schema().name()),
        );
    }
    let q = pairs(q.as_deref().unwrap_or(""));
    let topic = field(&q, "topic");
    let text = field(&q, "q");
    let snap = ui.fresh_snapshot().await;
    let filtered = topic.is_some() || text.is_some();
    // An unfiltered list is the snapshot's; a filter is this viewer's own
    // query, on the dead index, as `outbox dead list` would run it.
    let (dead, dead_error) = if filtered {
        match ui
            .inner
            .dead
            .newest(topic.as_deref(), text.as_deref(), FILTERED_DEAD)
            .await
        {
            Ok(d) => (d, None),
            Err(e) => (Vec::new(), Some(outbox_relay::error_chain(&e))),
        }
    } else {
        (snap.dead.clone(), None)
    };
    let flash = page::Flash::from_query(&q);
    let view = page::IndexView {
        schema: ui.inner.admin.schema().name(),
        snap: &snap,
        dead: &dead,
        dead_error: dead_error.as_deref(),
        topic: topic.as_deref(),
        text: text.as_deref(),
        flash,
        access: ui.inner.auth.access(&headers),
    };
    page::html(StatusCode::OK, page::index(&view))
}

async fn events(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    if !ui.may_read(&headers) {
        return page::problem(StatusCode::UNAUTHORIZED, "sign in with the token first");
    }
    let Ok(permit) = ui.inner.streams.clone().try_acquire_owned() else {
        return page::problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live views open; reload the page later",
        );
    };
    let mut rx = ui.inner.snapshots.subscribe();
    ui.inner.wake.notify_one();
    // The current snapshot first (if there is one yet), then each new one.
    rx.mark_changed();
    let stop = ui.inner.shutdown.clone();
    // The permit lives as long as the stream.
    let state = (rx, stop, permit);
    let stream = futures_util::stream::unfold(state, |(mut rx, stop, permit)| async move {
        loop {
            tokio::select! {
                changed = rx.changed() => changed.ok()?,
                _ = stop.cancelled() => return None,
            }
            let snap = rx.borrow_and_update().clone();
            if snap.seq > 0 {
                let event = Event::default()
                    .event("snapshot")
                    .retry(RECONNECT)
                    .data(snap.event.as_str());
                return Some((Ok::<_, Infallible>(event), (rx, stop, permit)));
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn detail(State(ui): State<Ui>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if !ui.may_read(&headers) {
        return page::problem(StatusCode::UNAUTHORIZED, "sign in with the token first");
    }
    let Ok(id) = id.parse::<i64>() else {
        return page::problem(StatusCode::NOT_FOUND, "no such message id");
    };
    match ui.inner.dead.show(id).await {
        Ok(m) => page::html(
            StatusCode::OK,
            page::detail(
                ui.inner.admin.schema().name(),
                &m,
                ui.inner.auth.access(&headers),
            ),
        ),
        Err(outbox_relay::Error::NotDead(n)) => {
            let what = n.first().map(ToString::to_string).unwrap_or_default();
            page::problem(StatusCode::NOT_FOUND, &what)
        }
        Err(e) => page::problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &outbox_relay::error_chain(&e),
        ),
    }
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/ui.js"),
    )
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/ui.css"),
    )
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn only_addresses_localhost_and_named_hosts_are_answered() {
        let allowed = vec!["ops.internal".to_owned()];
        for ok in [
            "127.0.0.1:9091",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:9091",
            "localhost",
            "LOCALHOST:9091",
            "ops.internal:9091",
            "ops.internal.",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for refused in [
            "evil.example:9091",
            "evil.example",
            "127.0.0.1.evil.example",
            "[::1",
            "",
        ] {
            assert!(!host_allowed(refused, &allowed), "{refused}");
        }
    }
}
