//! `http://…`, `https://…`: the URL is the endpoint, verbatim (its query
//! belongs to the receiver). The publisher's own options come from the
//! environment, so nothing can collide with the endpoint's URL:
//!
//! | variable                     | default   | meaning                                   |
//! |------------------------------|-----------|-------------------------------------------|
//! | `OUTBOX_WEBHOOK_SECRET`      | (none)    | signing secret, `whsec_<base64>` or plain |
//! | `OUTBOX_WEBHOOK_TIMEOUT`     | `10s`     | per request: `250ms`, `10s`, `2m` or secs |
//! | `OUTBOX_WEBHOOK_CONCURRENCY` | `16`      | requests in flight within a batch         |
//! | `OUTBOX_WEBHOOK_SOURCE`      | `/outbox` | CloudEvents `source`                      |

use crate::envelope::DEFAULT_SOURCE;
use crate::publishers::kit::options::endpoint;
use crate::{Error, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;

/// Environment variable names.
pub mod env {
    /// The signing secret.
    pub const SECRET: &str = "OUTBOX_WEBHOOK_SECRET";
    /// Per-request timeout.
    pub const TIMEOUT: &str = "OUTBOX_WEBHOOK_TIMEOUT";
    /// Requests in flight within a batch.
    pub const CONCURRENCY: &str = "OUTBOX_WEBHOOK_CONCURRENCY";
    /// CloudEvents `source`.
    pub const SOURCE: &str = "OUTBOX_WEBHOOK_SOURCE";
}

/// A Standard Webhooks signing key. Its bytes never reach logs, errors or
/// `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(***)")
    }
}

impl WebhookSecret {
    /// `whsec_<base64>` (the Standard Webhooks form: the key is the decoded
    /// bytes) or any other non-empty text (the key is its UTF-8 bytes).
    pub fn parse(s: &str) -> Result<Self> {
        let key = match s.strip_prefix("whsec_") {
            Some(b64) => B64.decode(b64.trim()).map_err(|_| {
                Error::publisher(format!(
                    "{}: the part after whsec_ is not valid base64",
                    env::SECRET
                ))
            })?,
            None => s.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err(Error::publisher(format!("{} is empty", env::SECRET)));
        }
        Ok(Self(key))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = self.mac(id, timestamp, body).finalize().into_bytes();
        format!("v1,{}", B64.encode(tag))
    }

    /// Whether any `v1,` entry of a (space-separated) `webhook-signature`
    /// header matches, compared in constant time. The caller also checks
    /// that `timestamp` is recent, against replays.
    pub fn verify(&self, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
        header.split(' ').any(|entry| {
            entry
                .strip_prefix("v1,")
                .and_then(|b64| B64.decode(b64).ok())
                .is_some_and(|tag| self.mac(id, timestamp, body).verify_slice(&tag).is_ok())
        })
    }
}

/// How the webhook publisher posts.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The endpoint every message is POSTed to.
    pub url: String,
    /// Signs each request when set.
    pub secret: Option<WebhookSecret>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Requests in flight within a batch.
    pub concurrency: usize,
    /// CloudEvents `source`.
    pub source: String,
}

// The URL may hold a password.
crate::debug::debug_showing!(HttpConfig {
    url: crate::redact::redact,
    secret,
    timeout,
    concurrency,
    source,
});

impl HttpConfig {
    /// `url` with defaults: unsigned, 10 s timeout, 16 requests in flight.
    pub fn new(url: &str) -> Result<Self> {
        Self::from_url_and_env(url, |_| None)
    }

    /// `url` with options read from the process environment.
    pub fn from_env(url: &str) -> Result<Self> {
        Self::from_url_and_env(url, |k| std::env::var(k).ok())
    }

    /// `url` with options read through `var` (a test passes a map).
    pub fn from_url_and_env(url: &str, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        // Checked whole now: reqwest refuses a URL without a host only when
        // it builds each request, and that "builder error" is permanent, so
        // the whole backlog would go dead. The query is the endpoint's own.
        endpoint("http", url, &["http", "https"])?;
        let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let mut cfg = Self {
            url: url.to_owned(),
            secret: var(env::SECRET)
                .map(|s| WebhookSecret::parse(&s))
                .transpose()?,
            timeout: Duration::from_secs(10),
            concurrency: 16,
            source: var(env::SOURCE).unwrap_or_else(|| DEFAULT_SOURCE.to_owned()),
        };
        if let Some(t) = var(env::TIMEOUT) {
            cfg.timeout = parse_timeout(&t).ok_or_else(|| {
                Error::publisher(format!(
                    "{} must be a positive duration like 500ms, 10s or 2m, got {t:?}",
                    env::TIMEOUT
                ))
            })?;
        }
        if let Some(c) = var(env::CONCURRENCY) {
            cfg.concurrency = c
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| {
                    Error::publisher(format!("{} must be 1..=1024, got {c:?}", env::CONCURRENCY))
                })?;
        }
        Ok(cfg)
    }
}

fn parse_timeout(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = n.parse().ok()?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        _ => return None,
    };
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_secret_forms_sign_and_verify() {
        let whsec = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let plain = WebhookSecret::parse("not base64 at all").unwrap();
        for s in [whsec, plain] {
            let sig = s.sign("msg_1", 1_700_000_000, b"{}");
            assert!(sig.starts_with("v1,"));
            assert!(s.verify("msg_1", 1_700_000_000, b"{}", &format!("v1,bogus {sig}")));
            assert!(!s.verify("msg_1", 1_700_000_001, b"{}", &sig));
        }
        assert!(WebhookSecret::parse("whsec_!!!").is_err());
    }

    #[test]
    fn the_standard_webhooks_reference_vector() {
        // From the Standard Webhooks specification's examples.
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            s.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn options_from_the_environment_and_secrets_kept_out_of_debug() {
        let vars = |k: &str| match k {
            env::SECRET => Some("whsec_c2VjcmV0LWJ5dGVz".to_owned()),
            env::TIMEOUT => Some("250ms".to_owned()),
            env::CONCURRENCY => Some("4".to_owned()),
            _ => None,
        };
        let c = HttpConfig::from_url_and_env("https://h/hook?x=1", vars).unwrap();
        assert_eq!(c.url, "https://h/hook?x=1");
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.concurrency, 4);
        let d = format!("{c:?}");
        assert!(
            !d.contains("c2VjcmV0") && !d.contains("secret-bytes"),
            "{d}"
        );
        let bad = |k: &'static str, v: &'static str| {
            HttpConfig::from_url_and_env("http://h", move |n| (n == k).then(|| v.to_owned()))
                .unwrap_err()
                .to_string()
        };
        assert!(bad(env::TIMEOUT, "soon").contains(env::TIMEOUT));
        assert!(bad(env::CONCURRENCY, "0").contains(env::CONCURRENCY));
        assert!(HttpConfig::new("ftp://h").is_err());
        for url in [
            "http://",
            "https://",
            "http://:80/",
            "http://h:99999/",
            "https://u:p@",
        ] {
            let e = HttpConfig::new(url).unwrap_err().to_string();
            assert!(e.contains("http publisher"), "{url}: {e}");
        }
    }
}
