//! `http://`, `https://`: webhooks. One POST per message, several in flight
//! within a batch; the body is the CloudEvents structured form
//! (`application/cloudevents+json`), signed the Standard Webhooks way
//! (`webhook-id` = event_id, `webhook-timestamp`, `webhook-signature`).
//!
//! 2xx is success. 408, 429 and 5xx, timeouts and connection errors are
//! retryable (with the receiver's `Retry-After` passed on); any other
//! status is permanent. Redirects are not followed: a POST silently turned
//! into a GET elsewhere would be reported as delivered.

mod config;

pub use config::{setting, HttpConfig, WebhookSecret};

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::envelope::Envelope;
use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
use futures_util::stream::{self, StreamExt};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use std::time::{Duration, SystemTime};

/// The webhook publisher.
#[derive(Debug)]
pub struct HttpPublisher {
    cfg: HttpConfig,
    client: reqwest::Client,
}

impl HttpPublisher {
    /// A publisher for `cfg`.
    pub fn new(cfg: HttpConfig) -> Result<Self> {
        if cfg.secret.is_none() {
            tracing::warn!(
                "webhooks are sent unsigned: set {} ({}) to sign them",
                setting::SECRET,
                config::SETTINGS[0].env
            );
        }
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::publisher_from("cannot build the HTTP client", e))?;
        Ok(Self { cfg, client })
    }


    /// The configuration in use.
    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    async fn post(&self, m: &Message) -> Outcome {
        let env = Envelope::from(m);
        let body = env.to_cloudevent(&self.cfg.source).into_bytes();
        let id = env.event_id.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let mut req = self
            .client
            .post(&self.cfg.url)
            .header("content-type", "application/cloudevents+json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(secret) = &self.cfg.secret {
            req = req.header("webhook-signature", secret.sign(&id, timestamp, &body));
        }
        let resp = match req.body(body).send().await {
            Ok(r) => r,
            Err(e) => return Err(transport_error(e)),
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = retry_after(resp.headers(), SystemTime::now());
        // A short excerpt helps whoever reads dead_reason.
        let text = error_body(resp).await;
        let excerpt: String = text.chars().take(200).collect();
        let message = format!("webhook answered {status}: {}", excerpt.trim());
        if is_retryable(status) {
            Err(PublishError {
                retry_after,
                ..PublishError::retryable(message)
            })
        } else {
            Err(PublishError::permanent(message))
        }
    }
}

impl Publisher for HttpPublisher {
    const NAME: &'static str = "http";
    // Requests go out in parallel and may overtake each other.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Concurrent;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        // Collected first: a lazy `map` here trips rustc's Send inference
        // for the trait's `impl Future + Send` (rust-lang/rust#110338).
        let posts: Vec<_> = batch.iter().map(|m| self.post(m)).collect();
        stream::iter(posts)
            .buffered(self.cfg.concurrency)
            .collect()
            .await
    }

    async fn check(&self) -> Result<(), PublishError> {
        // Any answer means the endpoint is reachable; only transport errors count.
        self.client
            .head(&self.cfg.url)
            .send()
            .await
            .map(drop)
            .map_err(transport_error)
    }
}

/// 408 Request Timeout, 429 Too Many Requests and every 5xx.
pub fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// The most of an error response's body read, in bytes.
pub const MAX_ERROR_BODY: usize = 4 * 1024;

/// The longest wait a receiver's `Retry-After` may ask for.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// The start of an error response's body, at most [`MAX_ERROR_BODY`]
/// bytes. Read chunk by chunk and then dropped, which closes the
/// connection: a hostile receiver answering with an endless body costs
/// a few KiB, not gigabytes (the client's total timeout bounds the time).
async fn error_body(mut resp: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    drop(resp);
    String::from_utf8_lossy(&body).into_owned()
}

/// `Retry-After` as delay-seconds or an HTTP date (a date in the past is
/// no wait), at most [`MAX_RETRY_AFTER`]. Whatever the receiver sends
/// (a number too large for any integer, a negative one, the year 9999,
/// garbage) gives a bounded delay or `None`.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, now)
}

/// The value of a `Retry-After` header; see [`retry_after`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    let wait = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still "very long": the cap.
        v.parse::<u64>()
            .map_or(MAX_RETRY_AFTER, Duration::from_secs)
    } else {
        let at = httpdate::parse_http_date(v).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

fn transport_error(e: reqwest::Error) -> PublishError {
    // The URL may carry credentials; the error's own text must not.
    let what = if e.is_timeout() {
        "webhook timed out"
    } else if e.is_connect() {
        "webhook unreachable"
    } else {
        "webhook request failed"
    };
    let builder = e.is_builder();
    let detail = e.without_url().to_string();
    if builder {
        PublishError::permanent(format!("{what}: {detail}"))
    } else {
        PublishError::retryable(format!("{what}: {detail}"))
    }
}

/// This publisher, as it declares itself (see `kit/declare.rs`). Its
/// options are settings (`config::SETTINGS`, docs/publishers-b.md), not
/// URL options: the endpoint's query is the endpoint's own.
const DECLARATION: Declaration = Declaration {
    name: "http",
    schemes: &["http", "https"],
    not_served: &[],
    summary: "signed webhooks; settings webhook_* (OUTBOX_WEBHOOK_*)",
    settings: config::SETTINGS,
    options: &[],
};

impl Declared for HttpPublisher {
    const DECLARATION: Declaration = DECLARATION;

    async fn build(url: &str, ctx: &PublisherContext) -> Result<Self> {
        Self::new(HttpConfig::with_settings(url, &ctx.settings)?)
    }

    // The URL alone: each setting's value is checked by its own `check`.
    fn check(url: &str) -> Result<()> {
        HttpConfig::new(url).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("120"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(120)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        h.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(90)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h, now), None);
    }

    #[test]
    fn retry_after_is_bounded_whatever_the_receiver_sends() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for (value, want) in [
            ("9000000000000", Some(MAX_RETRY_AFTER)),
            ("99999999999999999999999999999", Some(MAX_RETRY_AFTER)),
            ("86401", Some(MAX_RETRY_AFTER)),
            ("0", Some(Duration::ZERO)),
            ("-5", None),
            ("+5", None),
            ("", None),
            ("1.5", None),
            ("Fri, 31 Dec 9999 23:59:59 GMT", Some(MAX_RETRY_AFTER)),
            ("Thu, 01 Jan 1970 00:00:00 GMT", Some(Duration::ZERO)),
            ("Mon, 99 Foo 2024 99:99:99 GMT", None),
        ] {
            assert_eq!(parse_retry_after(value, now), want, "{value}");
        }
    }

    #[test]
    fn status_classes() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [301, 400, 401, 403, 404, 409, 410, 422] {
            assert!(!is_retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }
}
