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

use crate::publishers::kit::declare::{Declaration, Opt};
use crate::publishers::kit::options::UrlOptions;
use crate::Result;
use std::time::Duration;

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
crate::debug::debug_showing!(AmqpConfig {
    uri: crate::redact::redact,
    exchange,
    declare,
    confirm_timeout,
    source,
    connection_name,
    max_message_size,
    allow_reserved,
});

/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "amqp",
    schemes: &["amqp"],
    not_served: &[("amqps", "amqps (TLS) is not supported by this build")],
    settings: &[],
    summary: "RabbitMQ with publisher confirms",
    options: &[
        Opt::new(
            &["exchange"],
            "`outbox`",
            "exchange every message is published to; `\"\"` (empty) is the default exchange, where the topic must be a queue name",
        ),
        Opt::new(
            &["declare"],
            "`false`",
            "declare the exchange on connect (type `topic`, durable); otherwise it must exist (checked with a passive declare)",
        ),
        Opt::new(
            &["confirm_timeout_ms"],
            "`30000`",
            "how long to wait for the broker's confirms of one batch, and for a connection",
        ),
        Opt::new(
            &["source"],
            "`/outbox`",
            "CloudEvents `source` attribute",
        ),
        Opt::new(
            &["connection_name"],
            "`outbox-relay`",
            "the name RabbitMQ shows for the connection (management UI, `rabbitmqctl list_connections`)",
        ),
        Opt::new(
            &["max_message_size"],
            "`134217728`",
            "refuse (permanent, that message alone) a body larger than this; set it to the broker's `max_message_size`, over which RabbitMQ closes the channel under the whole batch",
        ),
        Opt::new(
            &["allow_reserved"],
            "`false`",
            "with the default exchange, allow topics naming `amq.` queues (`amq.rabbitmq.reply-to`, server-named queues), refused otherwise",
        ),
        Opt::passed(
            &["heartbeat", "connection_timeout", "frame_max", "channel_max", "auth_mechanism"],
            "the client's",
            "passed to the AMQP client (lapin) as they are",
        ),
    ],
};

impl AmqpConfig {
    /// Parses and validates a publisher URL.
    pub fn from_url(raw: &str) -> Result<Self> {
        // lapin ignores a query parameter it does not know, so a typo would
        // silently fall back to its default: its own options are declared
        // (passed through) and any other is refused.
        let o = UrlOptions::declared(&DECLARATION, raw)?;
        let cfg = Self {
            uri: o.base.to_string(),
            exchange: o.get("exchange").unwrap_or(DEFAULT_EXCHANGE).to_owned(),
            declare: o.flag("declare")?.unwrap_or(false),
            confirm_timeout: o
                .positive("confirm_timeout_ms")?
                .map_or(Duration::from_secs(30), Duration::from_millis),
            source: o.source(),
            connection_name: o
                .get("connection_name")
                .unwrap_or("outbox-relay")
                .to_owned(),
            max_message_size: o
                .positive("max_message_size")?
                .map_or(Ok(DEFAULT_MAX_MESSAGE_SIZE), usize::try_from)
                .map_err(|_| o.error("max_message_size is larger than this machine's memory"))?,
            allow_reserved: o.allow_reserved()?,
        };
        // The default exchange ("") routes by queue name only: allowed, but
        // then the topic must be a queue name; mandatory catches a typo.
        if cfg.exchange.len() > 255 {
            return Err(o.error("exchange name is longer than 255 bytes"));
        }
        // RabbitMQ's rule for names; anything else fails on connect.
        if !cfg
            .exchange
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
        {
            return Err(o.error(format!(
                "exchange {:?} may hold only letters, digits, '-', '_', '.' and ':'",
                cfg.exchange
            )));
        }
        if cfg.declare && cfg.exchange.starts_with("amq.") {
            return Err(o.error(format!(
                "exchange {:?} cannot be declared: names starting with amq. are the broker's",
                cfg.exchange
            )));
        }
        if cfg.declare && cfg.exchange.is_empty() {
            return Err(o.error("the default exchange (\"\") cannot be declared"));
        }
        if cfg.source.is_empty() {
            return Err(o.error("source must not be empty"));
        }
        // lapin's own parser, now rather than at the first connect, so a
        // malformed value fails before anything is claimed.
        cfg.uri
            .parse::<lapin::uri::AMQPUri>()
            .map_err(|e| o.error(format!("not a valid AMQP URI: {e}")))?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publishers::kit::options::assert_refused;

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
        assert_refused(
            AmqpConfig::from_url,
            &[
                ("amqp://h/?max_message_size=0", "max_message_size"),
                ("amqp://h/?allow_reserved=maybe", "allow_reserved"),
                ("amqp://h/?exchange=a%2Fb", "only letters"),
            ],
        );
        let c = AmqpConfig::from_url("amqp://h/?exchange=&allow_reserved=true").unwrap();
        assert!(c.allow_reserved && c.exchange.is_empty());
        assert_eq!(c.max_message_size, DEFAULT_MAX_MESSAGE_SIZE);
        let e = AmqpConfig::from_url("amqps://h/").unwrap_err().to_string();
        assert!(e.contains("TLS"), "{e}");
        let d = format!("{:?}", AmqpConfig::from_url("amqp://u:hunter2@h/").unwrap());
        assert!(!d.contains("hunter2"), "{d}");
    }
}
