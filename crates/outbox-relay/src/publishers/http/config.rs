//! `http://…`, `https://…`: the URL is the endpoint, verbatim (its query
//! belongs to the receiver). The publisher's own options are therefore
//! [`Setting`]s, declared here ([`SETTINGS`]) and given like any other
//! setting (config file, environment, flag): `webhook_secret`
//! (`OUTBOX_WEBHOOK_SECRET`), `webhook_timeout`, `webhook_concurrency`,
//! `webhook_source`. Each value is read by one parser, which `outbox config
//! check` runs too.

use crate::envelope::DEFAULT_SOURCE;
use crate::publishers::kit::declare::{PublisherSettings, Setting};
use crate::publishers::kit::options::endpoint;
use crate::{Error, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;

/// The names of the webhook's settings (keys of [`PublisherSettings`]).
pub mod setting {
    /// The signing secret.
    pub const SECRET: &str = "webhook_secret";
    /// Per-request timeout.
    pub const TIMEOUT: &str = "webhook_timeout";
    /// Requests in flight within a batch.
    pub const CONCURRENCY: &str = "webhook_concurrency";
    /// CloudEvents `source`.
    pub const SOURCE: &str = "webhook_source";
}

/// Requests in flight within a batch, at most.
const MAX_CONCURRENCY: usize = 1024;

/// The webhook's settings, as it declares them.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting {
        name: setting::SECRET,
        env: "OUTBOX_WEBHOOK_SECRET",
        flag: None,
        default: None,
        unset: Some("none"),
        secret: true,
        numeric: false,
        help: "Signing secret of the webhooks, whsec_<base64> or any other text",
        meaning: "signing secret: `whsec_<base64>` (the Standard Webhooks form; the key is the decoded bytes) or any other text (the key is its UTF-8 bytes); unset, webhooks go unsigned (with a warning at start); no flag, as command lines show in `ps`",
        check: |v| WebhookSecret::parse_key(v).map(drop),
    },
    Setting {
        name: setting::TIMEOUT,
        env: "OUTBOX_WEBHOOK_TIMEOUT",
        flag: Some("--webhook-timeout"),
        default: Some("10s"),
        unset: None,
        secret: false,
        numeric: false,
        help: "Timeout of one webhook request, e.g. 250ms, 10s, 2m",
        meaning: "per request: `250ms`, `10s`, `2m` or plain seconds",
        check: |v| timeout(v).map(drop),
    },
    Setting {
        name: setting::CONCURRENCY,
        env: "OUTBOX_WEBHOOK_CONCURRENCY",
        flag: Some("--webhook-concurrency"),
        default: Some("16"),
        unset: None,
        secret: false,
        numeric: true,
        help: "Webhook requests in flight within a batch, 1–1024",
        meaning: "requests in flight within a batch, 1–1024",
        check: |v| concurrency(v).map(drop),
    },
    Setting {
        name: setting::SOURCE,
        env: "OUTBOX_WEBHOOK_SOURCE",
        flag: Some("--webhook-source"),
        default: Some(DEFAULT_SOURCE),
        unset: None,
        secret: false,
        numeric: false,
        help: "CloudEvents `source` of the webhooks",
        meaning: "CloudEvents `source`",
        check: |_| Ok(()),
    },
];

fn timeout(v: &str) -> Result<Duration, String> {
    parse_timeout(v)
        .ok_or_else(|| "must be a positive duration like 500ms, 10s or 2m (plain: seconds)".into())
}

fn concurrency(v: &str) -> Result<usize, String> {
    v.trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_CONCURRENCY).contains(n))
        .ok_or_else(|| format!("must be a whole number within 1..={MAX_CONCURRENCY}"))
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
        Self::parse_key(s)
            .map_err(|e| Error::publisher(format!("http publisher: {}: {e}", setting::SECRET)))
    }

    /// [`Self::parse`], its message naming neither the setting nor the value.
    fn parse_key(s: &str) -> Result<Self, String> {
        let key = match s.strip_prefix("whsec_") {
            Some(b64) => B64
                .decode(b64.trim())
                .map_err(|_| "the part after whsec_ is not valid base64".to_owned())?,
            None => s.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err("is empty".to_owned());
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
        Self::with_settings(url, &PublisherSettings::new())
    }

    /// `url` with the [`SETTINGS`] given in `settings` (by [`setting`]
    /// name), the others at their defaults. An error names the setting,
    /// never a secret's value.
    pub fn with_settings(url: &str, settings: &PublisherSettings) -> Result<Self> {
        // Checked whole now: reqwest refuses a URL without a host only when
        // it builds each request, and that "builder error" is permanent, so
        // the whole backlog would go dead. The query is the endpoint's own.
        endpoint("http", url, &["http", "https"])?;
        let get = |name: &str| settings.get(name).filter(|v| !v.trim().is_empty());
        let bad = |name: &str, v: &str, e: String| {
            Error::publisher(format!("http publisher: {name} = {v:?}: {e}"))
        };
        let mut cfg = Self {
            url: url.to_owned(),
            secret: get(setting::SECRET)
                .map(WebhookSecret::parse)
                .transpose()?,
            timeout: Duration::from_secs(10),
            concurrency: 16,
            source: get(setting::SOURCE).unwrap_or(DEFAULT_SOURCE).to_owned(),
        };
        if let Some(t) = get(setting::TIMEOUT) {
            cfg.timeout = timeout(t).map_err(|e| bad(setting::TIMEOUT, t, e))?;
        }
        if let Some(c) = get(setting::CONCURRENCY) {
            cfg.concurrency = concurrency(c).map_err(|e| bad(setting::CONCURRENCY, c, e))?;
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
    fn options_from_the_settings_and_secrets_kept_out_of_debug() {
        let given = PublisherSettings::new()
            .with(setting::SECRET, "whsec_c2VjcmV0LWJ5dGVz")
            .with(setting::TIMEOUT, "250ms")
            .with(setting::CONCURRENCY, "4");
        let c = HttpConfig::with_settings("https://h/hook?x=1", &given).unwrap();
        assert_eq!(c.url, "https://h/hook?x=1");
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.concurrency, 4);
        for d in [format!("{c:?}"), format!("{given:?}")] {
            assert!(
                !d.contains("c2VjcmV0") && !d.contains("secret-bytes"),
                "{d}"
            );
        }
        let bad = |k: &'static str, v: &'static str| {
            HttpConfig::with_settings("http://h", &PublisherSettings::new().with(k, v))
                .unwrap_err()
                .to_string()
        };
        assert!(bad(setting::TIMEOUT, "soon").contains(setting::TIMEOUT));
        assert!(bad(setting::CONCURRENCY, "0").contains(setting::CONCURRENCY));
        assert!(bad(setting::SECRET, "whsec_!!!").contains(setting::SECRET));
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

#[cfg(test)]
mod declared {
    use super::*;

    /// Each declared default passes its check and builds what
    /// [`HttpConfig::new`] builds; each check refuses what `with_settings`
    /// refuses, so `config check` and the relay agree.
    #[test]
    fn declared_defaults_are_the_defaults_and_checks_agree_with_the_parser() {
        let defaults = SETTINGS
            .iter()
            .filter_map(|s| s.default.map(|d| (s.name, d)))
            .fold(PublisherSettings::new(), |acc, (n, d)| acc.with(n, d));
        for s in SETTINGS {
            if let Some(d) = s.default {
                assert_eq!((s.check)(d), Ok(()), "{}", s.name);
            }
            assert_eq!(s.flag.is_none(), s.secret, "{}", s.name);
        }
        let url = "http://h/hook";
        assert_eq!(
            HttpConfig::with_settings(url, &defaults).unwrap(),
            HttpConfig::new(url).unwrap()
        );
        for s in SETTINGS {
            for v in ["", "0", "1", "10s", "whsec_", "whsec_!!", "x", "2000", "5m"] {
                let checked = (s.check)(v).is_ok();
                let given = PublisherSettings::new().with(s.name, v);
                let built = HttpConfig::with_settings(url, &given).is_ok();
                // An empty value is unset for both (the CLI never passes one).
                if !v.is_empty() {
                    assert_eq!(checked, built, "{} = {v:?}", s.name);
                }
            }
        }
    }
}
