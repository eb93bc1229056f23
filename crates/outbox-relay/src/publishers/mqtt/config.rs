//! `mqtt://user:pass@host:port?client_id=…&topic_map=dots|none&prefix=…&max_packet_size=…&allow_reserved=true`.
//!
//! Topics starting with `$` (`$SYS/…`, the broker's own; `$share/…`, a
//! subscription form) are refused, permanently, unless the URL says
//! `allow_reserved=true`. `max_packet_size` (bytes, default the protocol's
//! 268435455) should match the broker's (Mosquitto's `max_packet_size` /
//! `message_size_limit`): a larger message is refused before sending, as
//! the broker would drop the connection over it.

use crate::publishers::kit::declare::{Declaration, Opt};
use crate::publishers::kit::options::UrlOptions;
use crate::publishers::limits;
use crate::Result;
use std::time::Duration;

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

/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "mqtt",
    schemes: &["mqtt"],
    not_served: &[("mqtts", "mqtts (TLS) is not supported by this build")],
    settings: &[],
    summary: "MQTT 3.1.1, QoS 1",
    options: &[
        Opt::new(
            &["client_id"],
            "`outbox-<random>`",
            "MQTT client id; two clients with one id disconnect each other, so give each relay its own",
        ),
        Opt::new(
            &["topic_map"],
            "`dots`",
            "`dots`: `orders.created` → `orders/created` (MQTT levels, so subscribers can use `orders/+`); `none`: the topic as it is",
        ),
        Opt::new(
            &["prefix"],
            "(none)",
            "prepended with a `/`: `prefix=app` gives `app/orders/created`; no wildcards",
        ),
        Opt::new(
            &["timeout_ms"],
            "`30000`",
            "how long a batch waits for its PUBACKs (and a connect for CONNACK)",
        ),
        Opt::new(
            &["keep_alive_secs"],
            "`30`",
            "MQTT keep-alive (at least 5)",
        ),
        Opt::new(
            &["inflight"],
            "`100`",
            "QoS 1 messages in flight at once",
        ),
        Opt::new(
            &["max_packet_size"],
            "`268435455`",
            "refuse (permanent, that message alone) a PUBLISH larger than this; set it to the broker's limit (Mosquitto's `max_packet_size`), over which it closes the connection under the whole batch",
        ),
        Opt::new(
            &["allow_reserved"],
            "`false`",
            "allow topics starting with `$` (`$SYS/…`, `$share/…`), refused otherwise",
        ),
    ],
};

impl MqttConfig {
    /// Parses and validates a publisher URL.
    pub fn from_url(raw: &str) -> Result<Self> {
        let o = UrlOptions::declared(&DECLARATION, raw)?;
        let url = &o.base;
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let credentials = match (url.username(), url.password()) {
            ("", None) => None,
            (u, p) => Some((decode(u), decode(p.unwrap_or("")))),
        };
        let client_id = match o.get("client_id") {
            None => format!("outbox-{:08x}", rand::random::<u32>()),
            Some("") => return Err(o.error("client_id must not be empty")),
            // An MQTT string is at most 65,535 bytes (its length is a u16).
            Some(id) if id.len() > 65_535 => {
                return Err(o.error(format_args!(
                    "client_id is {} bytes; MQTT allows at most 65535",
                    id.len()
                )))
            }
            Some(id) => id.to_owned(),
        };
        let topic_map = match o.get("topic_map").unwrap_or("dots") {
            "dots" => TopicMap::Dots,
            "none" => TopicMap::None,
            v => return Err(o.error(format!("topic_map must be dots or none, got {v:?}"))),
        };
        let keep_alive = match o.positive("keep_alive_secs")? {
            None => Duration::from_secs(30),
            Some(secs) if secs >= 5 => Duration::from_secs(secs),
            Some(_) => return Err(o.error("keep_alive_secs must be at least 5")),
        };
        let inflight = match o.positive("inflight")? {
            None => 100,
            Some(n) => u16::try_from(n)
                .ok()
                .filter(|n| *n < u16::MAX)
                .ok_or_else(|| o.error(format!("inflight must be below 65535, got {n}")))?,
        };
        let max_packet_size = match o.positive("max_packet_size")? {
            None => super::MAX_REMAINING,
            Some(n) => usize::try_from(n)
                .ok()
                .filter(|n| *n <= super::MAX_REMAINING)
                .ok_or_else(|| {
                    o.error(format!(
                        "max_packet_size must be at most {}, got {n}",
                        super::MAX_REMAINING
                    ))
                })?,
        };
        let cfg = Self {
            port: url.port().unwrap_or(1883),
            host,
            client_id,
            credentials,
            topic_map,
            prefix: o
                .get("prefix")
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_owned(),
            timeout: o
                .positive("timeout_ms")?
                .map_or(Duration::from_secs(30), Duration::from_millis),
            keep_alive,
            inflight,
            max_packet_size,
            allow_reserved: o.allow_reserved()?,
        };
        if cfg.prefix.contains(['+', '#']) {
            return Err(o.error("prefix must not contain the wildcards + or #"));
        }
        // Checked here too: such a prefix would send every message to dead.
        if !cfg.allow_reserved && RESERVED.iter().any(|r| cfg.prefix.starts_with(r)) {
            return Err(o.error(format!(
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
    use crate::publishers::kit::options::assert_refused;

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
        let long_id = format!("mqtt://u:hunter2@h?client_id={}", "x".repeat(65_536));
        assert_refused(
            MqttConfig::from_url,
            &[
                ("mqtt://u:hunter2@h?topic_map=slashes", "topic_map"),
                ("mqtt://u:hunter2@h?bogus=1", "bogus"),
                ("mqtt://u:hunter2@h?timeout_ms=0", "timeout_ms"),
                ("mqtt://u:hunter2@h?prefix=a/%23", "wildcards"),
                ("mqtt://u:hunter2@h?prefix=$SYS", "allow_reserved=true"),
                ("mqtt://u:hunter2@h?allow_reserved=sure", "allow_reserved"),
                ("mqtt://u:hunter2@h?client_id=", "must not be empty"),
                (&long_id, "at most 65535"),
                (
                    "mqtt://u:hunter2@h?max_packet_size=268435456",
                    "max_packet_size",
                ),
            ],
        );
        let c = MqttConfig::from_url("mqtt://u:p%40ss@h").unwrap();
        assert_eq!(c.credentials, Some(("u".into(), "p@ss".into())));
        assert!(!format!("{c:?}").contains("p@ss"));
    }
}
