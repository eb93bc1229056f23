//! Turning one raw text value into a typed one, with a message that says
//! what was expected. The caller adds the key, the value and its source.

use crate::logging::LogFormat;
use outbox_relay::metrics::TopicLabels;
use std::net::SocketAddr;
use std::time::Duration;

/// A whole number within `min..=max`.
pub fn number<T>(s: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let n: T = s
        .trim()
        .parse()
        .map_err(|_| "expected a whole number".to_owned())?;
    if n < min || n > max {
        return Err(format!("must be between {min} and {max}"));
    }
    Ok(n)
}

/// A whole number within `range` (one of the engine's bounds).
pub fn within<T>(s: &str, range: &std::ops::RangeInclusive<T>) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    number(s, *range.start(), *range.end())
}

/// A positive size in bytes: `1048576`, `512KiB`, `16MiB`, `1GiB` (binary
/// units, as the defaults are written; the suffix is case-insensitive).
pub fn bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (digits, unit) = [
        ("kib", 1usize << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("b", 1),
    ]
    .iter()
    .find_map(|(suffix, unit)| lower.strip_suffix(suffix).map(|d| (d.trim(), *unit)))
    .unwrap_or((lower.as_str(), 1));
    let expected = || "expected a size in bytes, e.g. 1048576, 512KiB, 16MiB".to_owned();
    let n: usize = digits.parse().map_err(|_| expected())?;
    match n.checked_mul(unit) {
        Some(0) => Err("must be positive".to_owned()),
        Some(b) if b <= i64::MAX as usize => Ok(b),
        _ => Err("too large".to_owned()),
    }
}

/// Parses `5m`, `30s`, `1h30m`, `250ms`; a bare `0` means zero. The
/// duration flags (`--older-than`, ...) take this directly.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (expected a duration such as 30s, 5m, 1h)"))
}

/// The longest duration a configuration key takes: the relay's longest
/// retry delay, a century. Longer is a typo, and some would no longer fit a
/// timestamp once added to the clock.
pub const LONGEST: Duration = outbox_relay::retry::MAX_DELAY;

/// A duration that must not be zero, nor longer than [`LONGEST`].
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    // humantime's own message ("expected number at 0") says where, not what.
    let d = parse_duration(s)
        .map_err(|_| "expected a duration such as 250ms, 30s, 5m, 1h30m, 7d".to_owned())?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    if d > LONGEST {
        return Err("must be at most 100 years".into());
    }
    Ok(d)
}

/// The parser of a duration of at least `min` (and at most 100 years);
/// `why` says why shorter is refused.
pub fn duration_at_least(
    min: Duration,
    why: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> {
    move |s| {
        let d = positive_duration(s)?;
        if d < min {
            return Err(format!(
                "must be at least {} ({why})",
                humantime::format_duration(min)
            ));
        }
        Ok(d)
    }
}

/// `off` / `none` for "not set", else `inner`.
pub fn optional<T>(
    s: &str,
    inner: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Ok(None),
        _ => inner(s).map(Some),
    }
}

/// `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
pub fn switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

/// A comma-separated list of durations, e.g. `1s,5s,30s,2m,10m`.
pub fn backoff(s: &str) -> Result<Vec<Duration>, String> {
    let mut steps = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err("expected a comma-separated list of durations such as 1s,5s,30s,2m,10m, with no empty item".into());
        }
        steps.push(positive_duration(item).map_err(|e| format!("step {item:?}: {e}"))?);
    }
    Ok(steps)
}

/// A fraction in `[0, 1)`.
pub fn fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s
        .trim()
        .parse()
        .map_err(|_| "expected a number such as 0.1".to_owned())?;
    if !(0.0..1.0).contains(&f) {
        return Err("must be at least 0 and below 1".into());
    }
    Ok(f)
}

/// `ip:port`, e.g. `127.0.0.1:9090` or `[::1]:9090`.
pub fn socket_addr(s: &str) -> Result<SocketAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| "expected an address such as 127.0.0.1:9090 or [::]:9090".into())
}

/// Comma-separated host names (no port), lowercased: `outbox.internal,ops`.
pub fn host_names(s: &str) -> Result<Vec<String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            let ok = h.len() <= 253
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if ok {
                Ok(h.to_ascii_lowercase())
            } else {
                Err(format!(
                    "{h:?} is not a host name (letters, digits, '-', '.'; no port)"
                ))
            }
        })
        .collect()
}

/// How many distinct topics label `outbox_published_total`: a number, or
/// `off` to drop the label.
pub fn topic_labels(s: &str) -> Result<TopicLabels, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" | "none" | "0" => Ok(TopicLabels::Off),
        _ => number(s, 1, 100_000)
            .map(TopicLabels::Capped)
            .map_err(|e| format!("{e}, or off to drop the topic label")),
    }
}

/// `text` or `json`.
pub fn log_format(s: &str) -> Result<LogFormat, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("expected text or json".into()),
    }
}

/// A PostgreSQL URL (`postgres://` or `postgresql://`) or a libpq
/// `key=value` connection string.
pub fn database_url(s: &str) -> Result<String, String> {
    if let Some((scheme, _)) = s.split_once("://") {
        if scheme != "postgres" && scheme != "postgresql" {
            return Err(format!(
                "unsupported scheme {scheme:?}: expected postgres:// or postgresql://"
            ));
        }
    } else if !s.contains('=') {
        return Err(
            "expected a URL such as postgres://user@host:5432/db or key=value pairs".into(),
        );
    }
    // The relay's own parser (tokio-postgres's, with libpq's TLS
    // parameters), so a URL accepted here also connects, its certificate
    // files read; its message never contains the password.
    outbox_relay::connect::target(s).map_err(|e| match e {
        outbox_relay::Error::Config { .. } => e.detail(),
        other => format!("not a valid connection string: {}", other.detail()),
    })?;
    Ok(s.to_owned())
}

/// `postgres`, or a publisher URL the relay would accept: the engine's own
/// check (every option and its value), which connects nowhere.
pub fn publisher(s: &str) -> Result<String, String> {
    outbox_relay::publishers::AnyPublisher::check_url(s).map_err(|e| match e {
        outbox_relay::Error::Publisher { .. } => e.detail(),
        other => outbox_relay::error_chain(&other),
    })?;
    Ok(s.to_owned())
}

/// The operator page's token: at least `min` characters once trimmed. The
/// message never holds the token.
pub fn ui_token(s: &str, min: usize) -> Result<super::Secret, String> {
    let t = s.trim();
    if t.chars().count() < min {
        return Err(format!(
            "shorter than {min} characters; use a random one, e.g. `openssl rand -hex 24`"
        ));
    }
    Ok(super::Secret::from(t.to_owned()))
}

/// A relay id: any text of 1 to 200 characters.
pub fn relay_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() || s.len() > 200 {
        return Err("must be 1 to 200 characters".into());
    }
    Ok(s.to_owned())
}

/// Hides passwords in a URL (`user:***@`, `?password=***`) and in libpq
/// `key=value` strings (see [`outbox_relay::redact::redact`]).
pub fn redact(s: &str) -> String {
    outbox_relay::redact::redact(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_every_password_form() {
        for (input, want) in [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u@h/db?password=pw&x=1",
                "postgres://u@h/db?password=***&x=1",
            ),
            ("host=h password=pw user=u", "host=h password=*** user=u"),
            ("postgres", "postgres"),
        ] {
            assert_eq!(redact(input), want);
        }
    }

    #[test]
    fn database_urls() {
        assert!(database_url("postgres://u@h:5432/db").is_ok());
        assert!(database_url("host=/tmp user=x").is_ok());
        assert!(database_url("mysql://u@h/db")
            .unwrap_err()
            .contains("mysql"));
        assert!(database_url("nonsense").is_err());
    }

    #[test]
    fn values() {
        assert_eq!(number::<usize>("10", 1, 100), Ok(10));
        assert!(number::<usize>("0", 1, 100).is_err());
        assert!(number::<usize>("x", 1, 100).is_err());
        assert_eq!(backoff("1s, 2m").unwrap().len(), 2);
        assert!(backoff("1s,,2s").is_err());
        assert!(backoff("1s,5x").unwrap_err().contains("5x"));
        assert!(backoff("1s,300000y").unwrap_err().contains("at most"));
        assert!(positive_duration("100y").is_ok());
        assert!(positive_duration("101y").is_err());
        assert_eq!(optional("off", positive_duration), Ok(None));
        assert_eq!(switch("OFF"), Ok(false));
        assert!(socket_addr("localhost").is_err());
        assert!(fraction("1").is_err());
        assert!(publisher("redis://h").is_ok());
        assert!(publisher("://h").is_err());
        assert!(publisher("postgres").is_ok());
        assert!(publisher("carrier-pigeon://x")
            .unwrap_err()
            .contains("unknown publisher \"carrier-pigeon://x\""));
        // What the relay refuses, refused here: an unknown option, a bad
        // value, a scheme the engine does not build.
        assert!(publisher("redis://127.0.0.1:6379?max_len=10")
            .unwrap_err()
            .contains("max_len"));
        assert!(publisher("nats://127.0.0.1:4222?ack_timeout=soon").is_err());
        assert!(publisher("rediss://127.0.0.1:6379").is_err());
        assert!(publisher("postgres://u@h/db?sslmode=sometimes").is_err());
        assert!(publisher("redis://127.0.0.1:6379?maxlen=10").is_ok());
    }
}
