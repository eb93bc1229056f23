//! `mqtt://user:pass@host:port?client_id=…&topic_map=dots|none&prefix=…&max_packet_size=…&allow_reserved=true`.
//!
//! Topics starting with `$` (`$SYS/…`, the broker's own; `$share/…`, a
//! subscription form) are refused, permanently, unless the URL says
//! `allow_reserved=true`. `max_packet_size` (bytes, default the protocol's
//! 268435455) should match the broker's (Mosquitto's `max_packet_size` /
//! `message_size_limit`): a larger message is refused before sending, as
//! the broker would drop the connection over it.

use crate::publishers::limits;
use crate::{Error, Result};
use std::time::Duration;
use url::Url;

/// Topic prefixes that are the broker's, not the application's.
pub(crate) const RESERVED: [&str; 1] = ["$"];

/// How outbox topics become MQTT topic names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicMap {
    /// `orders.created` → `orders/created`: MQTT levels are `/`-separated,
    /// so subscribers can use `orders/+`.
    Dots,
    /// The topic as it is.
    None,
}

/// How the MQTT publisher connects and publishes.
#[derive(Clone, PartialEq, Eq)]
pub struct MqttConfig {
    /// Broker host.
    pub host: String,
    /// Broker port (1883 by default).
    pub port: u16,
    /// MQTT client id; a random `outbox-<hex>` by default, since two
    /// clients with one id disconnect each other.
    pub client_id: String,
    /// User name and password, if the URL has them.
    pub credentials: Option<(String, String)>,
    /// Topic mapping.
    pub topic_map: TopicMap,
    /// Prepended to every topic, joined with `/` (empty: none).
    pub prefix: String,
    /// How long a batch may wait for its PUBACKs (and a connect for its CONNACK).
    pub timeout: Duration,
    /// MQTT keep-alive.
    pub keep_alive: Duration,
    /// QoS 1 messages in flight at once.
    pub inflight: u16,
    /// The largest PUBLISH (remaining length, bytes) the broker takes.
    pub max_packet_size: usize,
    /// Let topics start with `$` (`allow_reserved`, default false).
    pub allow_reserved: bool,
}

// The password stays out of Debug.
impl std::fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("client_id", &self.client_id)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("topic_map", &self.topic_map)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("keep_alive", &self.keep_alive)
            .field("inflight", &self.inflight)
            .field("max_packet_size", &self.max_packet_size)
            .field("allow_reserved", &self.allow_reserved)
            .finish()
    }
}

impl MqttConfig {
    /// Parses and validates a publisher URL.
    pub fn from_url(raw: &str) -> Result<Self> {
        // Shown without its query: a misspelt option may hold a secret that
        // redaction cannot recognise by name.
        let shown = crate::redact::redact_without_query(raw);
        let bad = |m: String| Error::Publisher(format!("mqtt URL {shown:?}: {m}"));
        let url = Url::parse(raw).map_err(|e| bad(e.to_string()))?;
        match url.scheme() {
            "mqtt" => {}
            "mqtts" => return Err(bad("mqtts (TLS) is not supported by this build".into())),
            other => return Err(bad(format!("scheme must be mqtt, got {other}"))),
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("a host is required".into()))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if url.port() == Some(0) {
            return Err(bad("port 0 is not a port to connect to".into()));
        }
        let credentials = match (url.username(), url.password()) {
            ("", None) => None,
            (u, p) => Some((decode(u), decode(p.unwrap_or("")))),
        };
        let mut cfg = Self {
            host,
            port: url.port().unwrap_or(1883),
            client_id: format!("outbox-{:08x}", rand::random::<u32>()),
            credentials,
            topic_map: TopicMap::Dots,
            prefix: String::new(),
            timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(30),
            inflight: 100,
            max_packet_size: super::MAX_REMAINING,
            allow_reserved: false,
        };
        let positive = |k: &str, v: &str| -> Result<u64> {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(format!("{k} must be a positive integer, got {v:?}")))
        };
        for (k, v) in url.query_pairs() {
            match &*k {
                "client_id" if !v.is_empty() && v.len() <= 65_535 => cfg.client_id = v.into_owned(),
                "client_id" => return Err(bad("client_id must not be empty".into())),
                "topic_map" => {
                    cfg.topic_map = match &*v {
                        "dots" => TopicMap::Dots,
                        "none" => TopicMap::None,
                        _ => return Err(bad(format!("topic_map must be dots or none, got {v:?}"))),
                    }
                }
                "prefix" => cfg.prefix = v.trim_end_matches('/').to_owned(),
                "timeout_ms" => cfg.timeout = Duration::from_millis(positive(&k, &v)?),
                "keep_alive_secs" => {
                    let secs = positive(&k, &v)?;
                    if secs < 5 {
                        return Err(bad("keep_alive_secs must be at least 5".into()));
                    }
                    cfg.keep_alive = Duration::from_secs(secs);
                }
                "inflight" => {
                    cfg.inflight = u16::try_from(positive(&k, &v)?)
                        .ok()
                        .filter(|n| *n < u16::MAX)
                        .ok_or_else(|| bad(format!("inflight must be below 65535, got {v}")))?;
                }
                "max_packet_size" => {
                    cfg.max_packet_size = usize::try_from(positive(&k, &v)?)
                        .ok()
                        .filter(|n| *n <= super::MAX_REMAINING)
                        .ok_or_else(|| {
                            bad(format!(
                                "max_packet_size must be at most {}, got {v}",
                                super::MAX_REMAINING
                            ))
                        })?;
                }
                limits::ALLOW_RESERVED => {
                    cfg.allow_reserved = limits::parse_bool(&v)
                        .ok_or_else(|| bad(format!("{k} must be true or false, got {v:?}")))?;
                }
                other => return Err(bad(format!("unknown option {other:?}"))),
            }
        }
        if cfg.prefix.contains(['+', '#']) {
            return Err(bad("prefix must not contain the wildcards + or #".into()));
        }
        // Checked here too: such a prefix would send every message to dead.
        if !cfg.allow_reserved && RESERVED.iter().any(|r| cfg.prefix.starts_with(r)) {
            return Err(bad(format!(
                "prefix {:?} starts with $, the broker's reserved topics; add {}=true to mean it",
                cfg.prefix,
                limits::ALLOW_RESERVED
            )));
        }
        Ok(cfg)
    }

    /// The MQTT topic name for an outbox topic.
    pub fn mqtt_topic(&self, topic: &str) -> String {
        let mapped = match self.topic_map {
            TopicMap::Dots => topic.replace('.', "/"),
            TopicMap::None => topic.to_owned(),
        };
        if self.prefix.is_empty() {
            mapped
        } else {
            format!("{}/{mapped}", self.prefix)
        }
    }
}

fn decode(s: &str) -> String {
    // Userinfo is percent-encoded, where `+` is a plus, not a space.
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_topic_mapping() {
        let c =
            MqttConfig::from_url("mqtt://127.0.0.1:1884?client_id=r1&prefix=app/&topic_map=dots")
                .unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.client_id.as_str()),
            ("127.0.0.1", 1884, "r1")
        );
        assert_eq!(c.mqtt_topic("orders.created"), "app/orders/created");
        let c = MqttConfig::from_url("mqtt://h?topic_map=none").unwrap();
        assert_eq!(c.port, 1883);
        assert_eq!(c.mqtt_topic("orders.created"), "orders.created");
    }

    #[test]
    fn bad_values_are_named_and_passwords_hidden() {
        for (url, word) in [
            ("mqtt://u:hunter2@h?topic_map=slashes", "topic_map"),
            ("mqtt://u:hunter2@h?bogus=1", "bogus"),
            ("mqtt://u:hunter2@h?timeout_ms=0", "timeout_ms"),
            ("mqtt://u:hunter2@h?prefix=a/%23", "wildcards"),
            ("mqtt://u:hunter2@h?prefix=$SYS", "allow_reserved=true"),
            ("mqtt://u:hunter2@h?allow_reserved=sure", "allow_reserved"),
            (
                "mqtt://u:hunter2@h?max_packet_size=268435456",
                "max_packet_size",
            ),
        ] {
            let e = MqttConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let c = MqttConfig::from_url("mqtt://u:p%40ss@h").unwrap();
        assert_eq!(c.credentials, Some(("u".into(), "p@ss".into())));
        assert!(!format!("{c:?}").contains("p@ss"));
    }
}
