//! A real HTTP server that receives webhooks: records every request and
//! answers as each test tells it (a status, a `Retry-After`, or never).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// How the receiver answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The status code.
    pub status: u16,
    /// A `Retry-After` header value, if any.
    pub retry_after: Option<String>,
    /// Never answer (the client's timeout must fire).
    pub hang: bool,
    /// Answer only after this long (requests overlap).
    pub delay: Option<std::time::Duration>,
}

impl Rule {
    /// Answer `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
            hang: false,
            delay: None,
        }
    }

    /// Answer `status` after `delay`.
    pub fn delayed(status: u16, delay: std::time::Duration) -> Self {
        Self {
            delay: Some(delay),
            ..Self::status(status)
        }
    }

    /// Answer `status` with `Retry-After: value`.
    pub fn retry_after(status: u16, value: impl Into<String>) -> Self {
        Self {
            retry_after: Some(value.into()),
            ..Self::status(status)
        }
    }

    /// Never answer.
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::status(200)
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`.
    pub timestamp: String,
    /// `webhook-signature`, if sent.
    pub signature: Option<String>,
    /// `content-type`.
    pub content_type: String,
    /// Path and query the request was sent to.
    pub path_and_query: String,
    /// The body, as text.
    pub body: String,
    /// The status the receiver answered (or would have, for a hang).
    pub status: u16,
}

impl Received {
    /// The body parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("webhook body is JSON")
    }
}

/// Chooses the answer to the first request of an event id (`None`: the
/// usual rules apply).
type FirstRule = Arc<dyn Fn(&str) -> Option<Rule> + Send + Sync>;

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    rules: Mutex<HashMap<String, Rule>>,
    /// Per topic (the CloudEvent's `topic` extension), for requests without
    /// a rule of their event id.
    topic_rules: Mutex<HashMap<String, Rule>>,
    default: Mutex<Option<Rule>>,
    first: Mutex<Option<FirstRule>>,
    /// Event ids seen at least once.
    seen: Mutex<HashSet<String>>,
    arrived: Notify,
    /// Requests being answered now, and the most seen at once, per
    /// aggregate (the CloudEvent's `aggregatetype` and `subject`).
    in_flight: Mutex<HashMap<(String, String), (usize, usize)>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("received", &self.received)
            .field("rules", &self.rules)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

/// The server, on an ephemeral port of 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub struct Receiver {
    /// `http://127.0.0.1:<port>/hooks/outbox?tenant=acme` (a query of the
    /// endpoint's own, which must reach it untouched).
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver answering 200 unless told otherwise.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/hooks/outbox?tenant=acme"),
            shared,
            task,
        }
    }

    /// Answers requests for `event_id` with `rule`.
    pub fn respond(&self, event_id: impl Into<String>, rule: Rule) {
        self.shared
            .rules
            .lock()
            .unwrap()
            .insert(event_id.into(), rule);
    }

    /// Answers requests whose CloudEvent is on `topic` with `rule` (what a
    /// receiver that does not take a kind of event does), unless their
    /// event id has a rule of its own.
    pub fn respond_to_topic(&self, topic: impl Into<String>, rule: Rule) {
        self.shared
            .topic_rules
            .lock()
            .unwrap()
            .insert(topic.into(), rule);
    }

    /// Answers every request without a rule of its own with `rule`.
    pub fn respond_all(&self, rule: Rule) {
        *self.shared.default.lock().unwrap() = Some(rule);
    }

    /// Answers the first request of each event id with what `rule` says
    /// for that id (e.g. a 503 for a seeded random share of the ids); later
    /// requests of the id, and ids for which it says `None`, get the usual
    /// rules. Requests without a `webhook-id` (the relay's HEAD checks) are
    /// not asked about.
    pub fn respond_first_with(&self, rule: impl Fn(&str) -> Option<Rule> + Send + Sync + 'static) {
        *self.shared.first.lock().unwrap() = Some(Arc::new(rule));
    }

    /// What arrived so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived; returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        loop {
            let notified = self.shared.arrived.notified();
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            notified.await;
        }
    }

    /// The most requests of one aggregate (a structured CloudEvent's
    /// `aggregatetype` and `subject`) that were in flight at once, per
    /// aggregate seen.
    pub fn max_in_flight_per_aggregate(&self) -> HashMap<(String, String), usize> {
        self.shared
            .in_flight
            .lock()
            .unwrap()
            .iter()
            .map(|(k, (_, max))| (k.clone(), *max))
            .collect()
    }

    /// What arrived, as `verify_webhooks` reads it.
    pub fn as_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.received()
                .into_iter()
                .map(|r| {
                    serde_json::json!({
                        "id": r.id,
                        "timestamp": r.timestamp,
                        "signature": r.signature.unwrap_or_default(),
                        "body": r.body,
                    })
                })
                .collect(),
        )
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let id = header("webhook-id").unwrap_or_default();
    let first_time = !id.is_empty() && shared.seen.lock().unwrap().insert(id.clone());
    let first_rule = shared.first.lock().unwrap().clone();
    let rule = first_rule
        .filter(|_| first_time)
        .and_then(|f| f(&id))
        .or_else(|| shared.rules.lock().unwrap().get(&id).cloned())
        .or_else(|| {
            let ce = serde_json::from_slice::<serde_json::Value>(&body).ok()?;
            let topic = ce.get("topic")?.as_str()?.to_owned();
            shared.topic_rules.lock().unwrap().get(&topic).cloned()
        })
        .or_else(|| shared.default.lock().unwrap().clone())
        .unwrap_or_else(|| Rule::status(200));
    let got = Received {
        id,
        timestamp: header("webhook-timestamp").unwrap_or_default(),
        signature: header("webhook-signature"),
        content_type: header("content-type").unwrap_or_default(),
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        body: String::from_utf8_lossy(&body).into_owned(),
        status: rule.status,
    };
    let aggregate = serde_json::from_str::<serde_json::Value>(&got.body)
        .ok()
        .and_then(|ce| {
            let field = |k: &str| ce.get(k)?.as_str().map(str::to_owned);
            Some((field("aggregatetype")?, field("subject")?))
        });
    if let Some(a) = &aggregate {
        let mut map = shared.in_flight.lock().unwrap();
        let (now, max) = map.entry(a.clone()).or_default();
        *now += 1;
        *max = (*max).max(*now);
    }
    // Counted out when the answer goes, or when the client gives up.
    let _done = InFlight(shared.clone(), aggregate);
    shared.received.lock().unwrap().push(got);
    shared.arrived.notify_waiters();
    if rule.hang {
        std::future::pending::<()>().await;
    }
    if let Some(d) = rule.delay {
        tokio::time::sleep(d).await;
    }
    let status = StatusCode::from_u16(rule.status).expect("valid status");
    match rule.retry_after {
        Some(v) => (status, [("retry-after", v)], "try later").into_response(),
        None => (status, "").into_response(),
    }
}

/// One request of an aggregate in flight, until dropped.
struct InFlight(Arc<Shared>, Option<(String, String)>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(a) = &self.1 {
            if let Some((now, _)) = self.0.in_flight.lock().unwrap().get_mut(a) {
                *now -= 1;
            }
        }
    }
}
