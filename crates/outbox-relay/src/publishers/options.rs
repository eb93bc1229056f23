//! The `?key=value&…` options of a publisher URL, shared by every
//! `config.rs`. Unknown keys are refused: a typo must not fall back to a
//! default silently.

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
    /// Parses `url`, checking its scheme is one of `schemes` and every
    /// option is in `known` (where `"*."` admits any name holding a dot: the
    /// Kafka publisher passes those to librdkafka).
    pub(crate) fn parse(
        publisher: &'static str,
        url: &str,
        schemes: &[&str],
        known: &[&str],
    ) -> Result<Self> {
        // Shown without its query: an option the parser does not know (a
        // misspelt `pasword=`) is not recognisably a secret to redaction.
        let redacted = crate::redact::redact_without_query(url);
        let mut base = url::Url::parse(url)
            .map_err(|e| bad(publisher, format!("{redacted:?} is not a valid URL ({e})")))?;
        if !schemes.contains(&base.scheme()) {
            return Err(bad(
                publisher,
                format!("{redacted:?} must start with {}://", schemes.join("://, ")),
            ));
        }
        if base.host_str().map_or(true, str::is_empty) {
            return Err(bad(publisher, format!("{redacted:?} names no host")));
        }
        if base.port() == Some(0) {
            return Err(bad(publisher, format!("{redacted:?} names port 0")));
        }
        let mut values = BTreeMap::new();
        for (k, v) in base.query_pairs() {
            let dotted = known.contains(&"*.") && k.contains('.');
            if !dotted && !known.contains(&k.as_ref()) {
                return Err(bad(
                    publisher,
                    format!(
                        "unknown option {k:?} for {redacted:?}; known options: {}",
                        known
                            .iter()
                            .map(|k| if *k == "*." {
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
        base.set_query(None);
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

    /// The `allow_reserved` opt-in (default false), the same on every
    /// publisher: may topics address the broker's control plane?
    pub(crate) fn allow_reserved(&self) -> Result<bool> {
        let key = super::limits::ALLOW_RESERVED;
        match self.get(key) {
            None => Ok(false),
            Some(v) => super::limits::parse_bool(v)
                .ok_or_else(|| self.error(format!("{key}={v:?} must be true or false"))),
        }
    }

    /// An error about this publisher's URL.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> Error {
        bad(self.publisher, message)
    }
}

fn bad(publisher: &str, message: impl std::fmt::Display) -> Error {
    Error::Publisher(format!("{publisher} publisher: {message}"))
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
}
