//! The destination URL of a publisher and its `?key=value&…` options, one
//! parser for every `config.rs`. Unknown keys are refused, naming the key
//! and the accepted ones: a typo must not fall back to a default silently.
//! Every error shows the URL with its password redacted and without its
//! query (a misspelt `pasword=` is not recognisably a secret).

use super::declare::{Declaration, ANY_DOTTED};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::str::FromStr;

/// A publisher URL split into the part its client library takes and the
/// options this crate reads.
#[derive(Debug, Clone)]
pub(crate) struct UrlOptions {
    publisher: &'static str,
    /// The URL without its query string (what the broker client is given).
    pub(crate) base: url::Url,
    values: BTreeMap<String, String>,
}

impl UrlOptions {
    /// Parses `url` as its publisher declares: a scheme it knows but does
    /// not serve is refused with why; then its schemes, and exactly the
    /// options it documents.
    pub(crate) fn declared(d: &Declaration, url: &str) -> Result<Self> {
        unsupported_scheme(d.name, url, d.not_served)?;
        Self::parse_passing(d.name, url, d.schemes, &d.read(), &d.passed())
    }

    /// Parses `url`, checking its scheme is one of `schemes` and every
    /// option is in `known` (where `"*."` admits any name holding a dot: the
    /// Kafka publisher passes those to librdkafka).
    pub(crate) fn parse(
        publisher: &'static str,
        url: &str,
        schemes: &[&str],
        known: &[&str],
    ) -> Result<Self> {
        Self::parse_passing(publisher, url, schemes, known, &[])
    }

    /// [`Self::parse`], where the options named in `passthrough` belong to
    /// the client library: they stay in [`Self::base`]'s query, in their
    /// order, and are listed among the accepted ones.
    pub(crate) fn parse_passing(
        publisher: &'static str,
        url: &str,
        schemes: &[&str],
        known: &[&str],
        passthrough: &[&str],
    ) -> Result<Self> {
        let mut base = endpoint(publisher, url, schemes)?;
        let mut values = BTreeMap::new();
        let mut passed = Vec::new();
        for (k, v) in base.query_pairs() {
            if passthrough.contains(&k.as_ref()) {
                passed.push((k.into_owned(), v.into_owned()));
                continue;
            }
            let dotted = known.contains(&ANY_DOTTED) && k.contains('.');
            if !dotted && !known.contains(&k.as_ref()) {
                return Err(bad(
                    publisher,
                    format!(
                        "unknown option {k:?} for {:?}; known options: {}",
                        shown(url),
                        known
                            .iter()
                            .chain(passthrough)
                            .map(|k| if *k == ANY_DOTTED {
                                "librdkafka properties (names with a dot)"
                            } else {
                                k
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            if values.insert(k.to_string(), v.to_string()).is_some() {
                return Err(bad(publisher, format!("option {k:?} given twice")));
            }
        }
        if passed.is_empty() {
            base.set_query(None);
        } else {
            base.query_pairs_mut().clear().extend_pairs(passed);
        }
        base.set_fragment(None);
        Ok(Self {
            publisher,
            base,
            values,
        })
    }

    /// Every option whose name holds a dot, with its value.
    pub(crate) fn dotted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values
            .iter()
            .filter(|(k, _)| k.contains('.'))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The raw value of `key`, if given.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// `key` parsed as `T`; `what` describes the accepted values for the error.
    pub(crate) fn parsed<T: FromStr>(&self, key: &str, what: &str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    bad(
                        self.publisher,
                        format!("option {key}={v:?} is invalid: expected {what}"),
                    )
                })
            })
            .transpose()
    }

    /// `key` as a duration (`500ms`, `5s`, `2m`).
    pub(crate) fn duration(&self, key: &str) -> Result<Option<std::time::Duration>> {
        self.get(key)
            .map(|v| {
                parse_duration(v).ok_or_else(|| {
                    bad(
                        self.publisher,
                        format!("option {key}={v:?} is invalid: expected a duration such as 500ms, 5s or 2m"),
                    )
                })
            })
            .transpose()
    }

    /// `key` as a duration, or `default` when not given.
    pub(crate) fn duration_or(
        &self,
        key: &str,
        default: std::time::Duration,
    ) -> Result<std::time::Duration> {
        Ok(self.duration(key)?.unwrap_or(default))
    }

    /// The CloudEvents `source` attribute (`source`, default `/outbox`), the
    /// same option on every publisher that writes CloudEvents attributes.
    pub(crate) fn source(&self) -> String {
        self.get("source")
            .unwrap_or(crate::envelope::DEFAULT_SOURCE)
            .to_owned()
    }

    /// `key` as a whole number above zero.
    pub(crate) fn positive(&self, key: &str) -> Result<Option<u64>> {
        match self.parsed::<u64>(key, "a positive whole number")? {
            Some(0) => Err(self.error(format!(
                "option {key}=0 is invalid: expected a positive whole number"
            ))),
            n => Ok(n),
        }
    }

    /// `key` as `true`, `1`, `yes` or `false`, `0`, `no`.
    pub(crate) fn flag(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| {
                crate::publishers::limits::parse_bool(v)
                    .ok_or_else(|| self.error(format!("option {key}={v:?} must be true or false")))
            })
            .transpose()
    }

    /// The `allow_reserved` opt-in (default false), the same on every
    /// publisher: may topics address the broker's control plane?
    pub(crate) fn allow_reserved(&self) -> Result<bool> {
        Ok(self
            .flag(crate::publishers::limits::ALLOW_RESERVED)?
            .unwrap_or(false))
    }

    /// An error about this publisher's URL.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> Error {
        bad(self.publisher, message)
    }
}

/// `url` checked as a destination whose query belongs to the destination
/// itself (a webhook endpoint's): valid, one of `schemes`, with a host and
/// a port other than 0. Checked whole at start-up: a client library often
/// refuses such a URL only when it sends, and then each message would fail.
pub(crate) fn endpoint(publisher: &str, url: &str, schemes: &[&str]) -> Result<url::Url> {
    let base = url::Url::parse(url).map_err(|e| {
        Error::publisher_from(
            format!("{publisher} publisher: {:?} is not a valid URL", shown(url)),
            e,
        )
    })?;
    if !schemes.contains(&base.scheme()) {
        return Err(bad(
            publisher,
            format!(
                "{:?} must start with {}://",
                shown(url),
                schemes.join("://, ")
            ),
        ));
    }
    if base.host_str().map_or(true, str::is_empty) {
        return Err(bad(publisher, format!("{:?} names no host", shown(url))));
    }
    if base.port() == Some(0) {
        return Err(bad(publisher, format!("{:?} names port 0", shown(url))));
    }
    Ok(base)
}

/// Refuses a URL whose scheme this build knows but does not serve
/// (`amqps`, `mqtts`), saying why, before the generic scheme error.
pub(crate) fn unsupported_scheme(
    publisher: &str,
    url: &str,
    schemes: &[(&str, &str)],
) -> Result<()> {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    match schemes.iter().find(|(s, _)| s.eq_ignore_ascii_case(scheme)) {
        Some((_, why)) => Err(bad(publisher, format!("{:?}: {why}", shown(url)))),
        None => Ok(()),
    }
}

/// `url` as errors show it: without its password and its query.
fn shown(url: &str) -> String {
    crate::redact::redact_without_query(url)
}

fn bad(publisher: &str, message: impl std::fmt::Display) -> Error {
    Error::publisher(format!("{publisher} publisher: {message}"))
}

/// For the `config.rs` tests: each URL is refused with an error holding
/// its needle, and never the password `hunter2`.
#[cfg(test)]
pub(crate) fn assert_refused<T: std::fmt::Debug>(
    parse: impl Fn(&str) -> Result<T>,
    cases: &[(&str, &str)],
) {
    for (url, needle) in cases {
        // The chain, as users see it: a parser's error is the source.
        let e = crate::error_chain(&parse(url).unwrap_err());
        assert!(e.contains(needle), "{url}: {e}");
        assert!(!e.contains("hunter2"), "{url}: {e}");
    }
}

fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        _ => return None,
    };
    (ms > 0).then(|| std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_options_and_schemes_are_refused_by_name() {
        let e = UrlOptions::parse("redis", "redis://h:1/0?maxlenn=5", &["redis"], &["maxlen"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown option \"maxlenn\"") && e.contains("maxlen"),
            "{e}"
        );
        let e = UrlOptions::parse("redis", "nats://h:1", &["redis"], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must start with redis://"), "{e}");
    }

    #[test]
    fn options_are_parsed_and_stripped_from_the_base() {
        let o =
            UrlOptions::parse("x", "redis://u:p@h:1/2?n=7&d=5s", &["redis"], &["n", "d"]).unwrap();
        assert_eq!(o.base.as_str(), "redis://u:p@h:1/2");
        assert_eq!(o.parsed::<u64>("n", "a number").unwrap(), Some(7));
        assert_eq!(
            o.duration("d").unwrap(),
            Some(std::time::Duration::from_secs(5))
        );
        assert!(o.parsed::<u64>("d", "a number").is_err());
    }

    #[test]
    fn passthrough_options_stay_in_the_base_and_errors_hide_the_password() {
        let o = UrlOptions::parse_passing(
            "amqp",
            "amqp://u:hunter2@h/%2f?heartbeat=10&exchange=x&frame_max=4096",
            &["amqp"],
            &["exchange"],
            &["heartbeat", "frame_max"],
        )
        .unwrap();
        assert_eq!(
            o.base.as_str(),
            "amqp://u:hunter2@h/%2f?heartbeat=10&frame_max=4096"
        );
        assert_eq!(o.get("exchange"), Some("x"));
        let e = UrlOptions::parse_passing(
            "amqp",
            "amqp://u:hunter2@h/?bogus=1",
            &["amqp"],
            &["exchange"],
            &["heartbeat"],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("\"bogus\"") && e.contains("exchange, heartbeat"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = unsupported_scheme("amqp", "amqps://u:hunter2@h", &[("amqps", "no TLS")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no TLS") && !e.contains("hunter2"), "{e}");
        let o = UrlOptions::parse("x", "x://h?n=0&f=maybe", &["x"], &["n", "f"]).unwrap();
        assert!(o.positive("n").is_err());
        assert!(o.flag("f").unwrap_err().to_string().contains("f=\"maybe\""));
        assert!(endpoint("http", "http://h:0/", &["http"]).is_err());
        let e = endpoint("http", "https://u:p@", &["http", "https"]).unwrap_err();
        assert!(!e.to_string().contains("u:p"), "{e}");
    }
}
