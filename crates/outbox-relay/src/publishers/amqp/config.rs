//! `amqp://user:pass@host:port/vhost?exchange=outbox&declare=true&max_message_size=…&allow_reserved=true`.
//!
//! `max_message_size` (bytes, default 134217728, RabbitMQ's default) should
//! match the broker's: a larger body is refused before sending, as the
//! broker would close the channel over it. With the default exchange
//! (`exchange=`) the topic names a queue, and queues starting with `amq.`
//! (the broker's own, such as `amq.rabbitmq.reply-to`) are refused,
//! permanently, unless the URL says `allow_reserved=true`.
//!
//! The publisher's own options are taken out of the query; what is left
//! (`heartbeat`, `connection_timeout`, `frame_max`, ...) is passed to the
//! AMQP client unchanged.

use crate::envelope::DEFAULT_SOURCE;
use crate::publishers::{limits, redact_url};
use crate::{Error, Result};
use std::time::Duration;
use url::Url;

/// RabbitMQ's default `max_message_size` (128 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 134_217_728;

/// Exchange used when the URL names none.
pub const DEFAULT_EXCHANGE: &str = "outbox";

/// How the RabbitMQ publisher connects and publishes.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpConfig {
    /// The broker URI handed to the client (our options removed).
    pub uri: String,
    /// Exchange every message is published to; routing key = topic.
    pub exchange: String,
    /// Declare the exchange (topic, durable) on connect.
    pub declare: bool,
    /// How long to wait for the broker's confirms of one batch.
    pub confirm_timeout: Duration,
    /// CloudEvents `source` attribute.
    pub source: String,
    /// Shown by RabbitMQ for this connection (management UI, `rabbitmqctl`).
    pub connection_name: String,
    /// The largest body the broker takes (`max_message_size`, bytes).
    pub max_message_size: usize,
    /// Let topics name `amq.` queues through the default exchange
    /// (`allow_reserved`, default false).
    pub allow_reserved: bool,
}

// The URI holds the password.
impl std::fmt::Debug for AmqpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpConfig")
            .field("uri", &redact_url(&self.uri))
            .field("exchange", &self.exchange)
            .field("declare", &self.declare)
            .field("confirm_timeout", &self.confirm_timeout)
            .field("source", &self.source)
            .field("connection_name", &self.connection_name)
            .field("max_message_size", &self.max_message_size)
            .field("allow_reserved", &self.allow_reserved)
            .finish()
    }
}

/// The query parameters lapin reads (amq-protocol-uri), passed through.
const LAPIN_OPTIONS: [&str; 5] = [
    "heartbeat",
    "connection_timeout",
    "frame_max",
    "channel_max",
    "auth_mechanism",
];

impl AmqpConfig {
    /// Parses and validates a publisher URL.
    pub fn from_url(raw: &str) -> Result<Self> {
        // Shown without its query: a misspelt option may hold a secret that
        // redaction cannot recognise by name.
        let shown = crate::redact::redact_without_query(raw);
        let bad = |m: String| Error::Publisher(format!("amqp URL {shown:?}: {m}"));
        let mut url = Url::parse(raw).map_err(|e| bad(e.to_string()))?;
        match url.scheme() {
            "amqp" => {}
            "amqps" => return Err(bad("amqps (TLS) is not supported by this build".into())),
            other => return Err(bad(format!("scheme must be amqp, got {other}"))),
        }
        if url.host_str().map_or(true, str::is_empty) {
            return Err(bad("a host is required".into()));
        }
        if url.port() == Some(0) {
            return Err(bad("port 0 is not a port to connect to".into()));
        }
        let mut cfg = Self {
            uri: String::new(),
            exchange: DEFAULT_EXCHANGE.to_owned(),
            declare: false,
            confirm_timeout: Duration::from_secs(30),
            source: DEFAULT_SOURCE.to_owned(),
            connection_name: "outbox-relay".to_owned(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            allow_reserved: false,
        };
        let mut passthrough = Vec::new();
        for (k, v) in url.query_pairs() {
            match &*k {
                "exchange" => cfg.exchange = v.into_owned(),
                "declare" => {
                    cfg.declare = parse_bool(&v)
                        .ok_or_else(|| bad(format!("declare must be true or false, got {v:?}")))?
                }
                "confirm_timeout_ms" => {
                    let ms: u64 = v.parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                        bad(format!(
                            "confirm_timeout_ms must be a positive integer, got {v:?}"
                        ))
                    })?;
                    cfg.confirm_timeout = Duration::from_millis(ms);
                }
                "source" => cfg.source = v.into_owned(),
                "connection_name" => cfg.connection_name = v.into_owned(),
                "max_message_size" => {
                    cfg.max_message_size = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        bad(format!(
                            "max_message_size must be a positive number of bytes, got {v:?}"
                        ))
                    })?;
                }
                limits::ALLOW_RESERVED => {
                    cfg.allow_reserved = parse_bool(&v)
                        .ok_or_else(|| bad(format!("{k} must be true or false, got {v:?}")))?
                }
                k if LAPIN_OPTIONS.contains(&k) => passthrough.push((k.to_owned(), v.into_owned())),
                // lapin ignores a query parameter it does not know: a typo
                // would silently fall back to its default.
                other => {
                    return Err(bad(format!(
                        "unknown option {other:?}; known options: exchange, declare, \
                         confirm_timeout_ms, source, connection_name, max_message_size, \
                         {}, {}",
                        limits::ALLOW_RESERVED,
                        LAPIN_OPTIONS.join(", ")
                    )))
                }
            }
        }
        // The default exchange ("") routes by queue name only: allowed, but
        // then the topic must be a queue name; mandatory catches a typo.
        if cfg.exchange.len() > 255 {
            return Err(bad("exchange name is longer than 255 bytes".into()));
        }
        // RabbitMQ's rule for names; anything else fails on connect.
        if !cfg
            .exchange
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
        {
            return Err(bad(format!(
                "exchange {:?} may hold only letters, digits, '-', '_', '.' and ':'",
                cfg.exchange
            )));
        }
        if cfg.declare && cfg.exchange.starts_with("amq.") {
            return Err(bad(format!(
                "exchange {:?} cannot be declared: names starting with amq. are the broker's",
                cfg.exchange
            )));
        }
        if cfg.declare && cfg.exchange.is_empty() {
            return Err(bad("the default exchange (\"\") cannot be declared".into()));
        }
        if cfg.source.is_empty() {
            return Err(bad("source must not be empty".into()));
        }
        if passthrough.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(passthrough);
        }
        cfg.uri = url.into();
        // lapin's own parser, now rather than at the first connect, so a
        // malformed value fails before anything is claimed.
        cfg.uri
            .parse::<lapin::uri::AMQPUri>()
            .map_err(|e| bad(format!("not a valid AMQP URI: {e}")))?;
        Ok(cfg)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_out_of_the_query_and_the_rest_passes_through() {
        let c = AmqpConfig::from_url(
            "amqp://guest:guest@127.0.0.1:5672/%2f?exchange=ev&declare=true&heartbeat=10",
        )
        .unwrap();
        assert_eq!(c.exchange, "ev");
        assert!(c.declare);
        assert_eq!(c.uri, "amqp://guest:guest@127.0.0.1:5672/%2f?heartbeat=10");
    }

    #[test]
    fn defaults() {
        let c = AmqpConfig::from_url("amqp://127.0.0.1").unwrap();
        assert_eq!(c.exchange, DEFAULT_EXCHANGE);
        assert!(!c.declare);
        assert_eq!(c.uri, "amqp://127.0.0.1");
    }

    #[test]
    fn bad_values_are_named_and_passwords_hidden() {
        let e = AmqpConfig::from_url("amqp://u:hunter2@h/?declare=maybe")
            .unwrap_err()
            .to_string();
        assert!(e.contains("declare"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        for (url, needle) in [
            ("amqp://h/?max_message_size=0", "max_message_size"),
            ("amqp://h/?allow_reserved=maybe", "allow_reserved"),
            ("amqp://h/?exchange=a%2Fb", "only letters"),
        ] {
            let e = AmqpConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        let c = AmqpConfig::from_url("amqp://h/?exchange=&allow_reserved=true").unwrap();
        assert!(c.allow_reserved && c.exchange.is_empty());
        assert_eq!(c.max_message_size, DEFAULT_MAX_MESSAGE_SIZE);
        let e = AmqpConfig::from_url("amqps://h/").unwrap_err().to_string();
        assert!(e.contains("TLS"), "{e}");
        let d = format!("{:?}", AmqpConfig::from_url("amqp://u:hunter2@h/").unwrap());
        assert!(!d.contains("hunter2"), "{d}");
    }
}
