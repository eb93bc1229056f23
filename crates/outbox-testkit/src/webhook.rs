//! A real HTTP server that receives webhooks: records every request and
//! answers as each test tells it (a status, a `Retry-After`, or never).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
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
}

impl Rule {
    /// Answer `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
            hang: false,
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
}

impl Received {
    /// The body parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("webhook body is JSON")
    }
}

#[derive(Debug, Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    rules: Mutex<HashMap<String, Rule>>,
    default: Mutex<Option<Rule>>,
    arrived: Notify,
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

    /// Answers every request without a rule of its own with `rule`.
    pub fn respond_all(&self, rule: Rule) {
        *self.shared.default.lock().unwrap() = Some(rule);
    }

    /// What arrived so far.
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
    let got = Received {
        id: header("webhook-id").unwrap_or_default(),
        timestamp: header("webhook-timestamp").unwrap_or_default(),
        signature: header("webhook-signature"),
        content_type: header("content-type").unwrap_or_default(),
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let rule = shared
        .rules
        .lock()
        .unwrap()
        .get(&got.id)
        .cloned()
        .or_else(|| shared.default.lock().unwrap().clone())
        .unwrap_or_else(|| Rule::status(200));
    shared.received.lock().unwrap().push(got);
    shared.arrived.notify_waiters();
    if rule.hang {
        std::future::pending::<()>().await;
    }
    let status = StatusCode::from_u16(rule.status).expect("valid status");
    match rule.retry_after {
        Some(v) => (status, [("retry-after", v)], "try later").into_response(),
        None => (status, "").into_response(),
    }
}
