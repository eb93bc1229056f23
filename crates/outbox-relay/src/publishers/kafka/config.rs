//! `kafka://host:port[,host:port]?message_timeout=20s&partitioner=murmur2_random&source=/outbox&allow_reserved=true&<librdkafka property>=…`
//!
//! Keyed messages go to the partition the Java client would choose for the
//! key (`murmur2_random`, not librdkafka's own `consistent_random`), so a
//! consumer that co-partitions or joins by key agrees with producers
//! written in Java, Kafka Streams or ksqlDB.
//!
//! Each message is checked before it is handed to librdkafka against the
//! producer's `message.max.bytes` (1000000 unless the URL sets it) and
//! Kafka's topic name rules. Topics starting with `__`
//! (`__consumer_offsets`, `__transaction_state`) are the cluster's own and
//! are refused, permanently, unless the URL says `allow_reserved=true`.

use crate::publishers::kit::declare::{Declaration, Opt, ANY_DOTTED};
use crate::publishers::kit::options::UrlOptions;
use crate::redact::redact;
use crate::{Error, Result};
use std::time::Duration;

/// Options of the Kafka publisher.
#[derive(Clone)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// How long librdkafka keeps trying to deliver a message before
    /// reporting it failed, retryable (`message_timeout`, default
    /// [`DEFAULT_MESSAGE_TIMEOUT`]).
    pub message_timeout: Duration,
    /// The CloudEvents `source` attribute (`source`, default `/outbox`).
    pub source: String,
    /// librdkafka's `partitioner` (`partitioner`, default
    /// [`DEFAULT_PARTITIONER`]).
    pub partitioner: String,
    /// The producer's `message.max.bytes`, checked before sending.
    pub message_max_bytes: usize,
    /// Let topics start with `__` (`allow_reserved`, default false).
    pub allow_reserved: bool,
    /// librdkafka properties given in the URL (any option name with a dot,
    /// such as `security.protocol` or `compression.type`); may hold secrets.
    pub(crate) properties: Vec<(String, String)>,
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.properties.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("message_timeout", &self.message_timeout)
            .field("properties", &names)
            .finish_non_exhaustive()
    }
}

/// The Java client's partitioning of keyed messages (murmur2 of the key,
/// positive, modulo the partitions); unkeyed ones go to a random partition.
pub const DEFAULT_PARTITIONER: &str = "murmur2_random";

/// How long librdkafka keeps trying a message by default: under the
/// relay's default publish timeout (30 s), so that a message librdkafka
/// cannot deliver is reported with its own reason before the relay's
/// deadline fails the batch with a generic one, and far under the lease.
pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(20);

/// librdkafka's default `message.max.bytes`.
pub const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Topic prefixes that are the cluster's own.
pub(crate) const RESERVED: [&str; 1] = ["__"];

/// Properties the publisher's guarantees rest on: set by it, never by the URL.
const FIXED: [(&str, &str); 3] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("bootstrap.servers", ""),
];

/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "kafka",
    schemes: &["kafka"],
    not_served: &[],
    settings: &[],
    summary: "Kafka",
    options: &[
        Opt::new(
            &["message_timeout"],
            "`20s`",
            "how long librdkafka keeps trying a message before reporting it failed (retryable): under the relay's `--publish-timeout` (30 s), so the report names its cause, and far under the lease (5 min)",
        ),
        Opt::new(
            &["partitioner"],
            "`murmur2_random`",
            "librdkafka's `partitioner`: the default puts a key on the partition the Java client (Kafka Streams, ksqlDB) chooses, `murmur2(key) & 0x7fffffff % partitions`; librdkafka's own default, `consistent_random` (CRC32), agrees with Java for few keys. A value librdkafka does not know is refused at start",
        ),
        Opt::new(
            &["source"],
            "`/outbox`",
            "the CloudEvents `source` attribute",
        ),
        Opt::new(
            &["acks"],
            "`all`",
            "fixed: the idempotent producer waits for every in-sync replica; another value is refused",
        ),
        Opt::new(
            &[ANY_DOTTED],
            "—",
            "passed to librdkafka as is (`compression.type`, `linger.ms`, `security.protocol`, `sasl.*`, …)",
        ),
        Opt::new(
            &["allow_reserved"],
            "`false`",
            "allow topics starting with `__` (`__consumer_offsets`, `__transaction_state`), refused otherwise",
        ),
    ],
};

impl KafkaConfig {
    /// Parses and validates a `kafka://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        // Checked first: the options are parsed from a URL rebuilt around the
        // first broker, and a rebuilt string that is no URL of its own would
        // slip past redaction in the error message.
        let Some(rest) = url.strip_prefix("kafka://") else {
            return Err(Error::publisher(format!(
                "kafka publisher: {:?} must start with kafka://",
                redact(url)
            )));
        };
        let (list, query) = rest.split_once('?').unwrap_or((rest, ""));
        // librdkafka would take `user:password@host` for a host name, and
        // the broker list is shown in Debug output and errors.
        if list.contains('@') {
            return Err(Error::publisher(
                "kafka publisher: a broker address holds credentials (an @ before the host); \
                 pass them as the sasl.username and sasl.password options instead",
            ));
        }
        let first = list.split(',').next().unwrap_or_default();
        let o = UrlOptions::declared(&DECLARATION, &format!("kafka://{first}?{query}"))?;
        let mut hosts = Vec::new();
        for host in list.split(',') {
            let ok = host
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(o.error(format!(
                    "{host:?} is not host:port; list brokers as kafka://host:port,host:port"
                )));
            }
            hosts.push(host);
        }
        let mut properties = Vec::new();
        let acks = o.get("acks").map(|v| ("acks", v));
        for (k, v) in o.dotted().chain(acks) {
            if let Some((_, fixed)) = FIXED.iter().find(|(name, _)| *name == k) {
                if *fixed != v {
                    return Err(o.error(format!(
                        "{k} is set by the publisher{} and cannot be changed in the URL",
                        if fixed.is_empty() {
                            String::new()
                        } else {
                            format!(" ({k}={fixed})")
                        }
                    )));
                }
                continue;
            }
            properties.push((k.to_owned(), v.to_owned()));
        }
        let message_max_bytes = o
            .parsed::<usize>("message.max.bytes", "a number of bytes")?
            .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES);
        let allow_reserved = o.allow_reserved()?;
        let cfg = Self {
            message_max_bytes,
            allow_reserved,
            bootstrap_servers: hosts.join(","),
            message_timeout: o.duration_or("message_timeout", DEFAULT_MESSAGE_TIMEOUT)?,
            source: o.source(),
            partitioner: o
                .get("partitioner")
                .unwrap_or(DEFAULT_PARTITIONER)
                .to_owned(),
            properties,
        };
        // librdkafka checks every property's name and value when they are
        // set, without connecting: a misspelt property fails here, before
        // the relay claims anything, not at the first publish.
        cfg.client_config()
            .create_native_config()
            .map_err(|e| o.error(cfg.describe(&e)))?;
        Ok(cfg)
    }

    /// `e` in words, without the values of the URL's properties: librdkafka
    /// echoes the value it refused, and it may be a `sasl.password`.
    /// How long a topic's lookup in the broker's metadata may take: a few
    /// seconds, and never longer than a delivery may.
    pub(crate) fn metadata_timeout(&self) -> Duration {
        self.message_timeout.min(Duration::from_secs(5))
    }

    pub(crate) fn describe(&self, e: &rdkafka::error::KafkaError) -> String {
        let mut text = match e {
            rdkafka::error::KafkaError::ClientConfig(_, desc, key, _) => {
                format!("property {key:?}: {desc}")
            }
            other => other.to_string(),
        };
        // librdkafka quotes the value it echoes; any value is hidden, since
        // a misspelt `sasl.pasword` is not recognisably a secret by name.
        for (_, v) in &self.properties {
            if !v.is_empty() {
                text = text.replace(&format!("{v:?}"), &format!("{:?}", crate::redact::HIDDEN));
                text = text.replace(v.as_str(), crate::redact::HIDDEN);
            }
        }
        text
    }

    /// The librdkafka configuration of the producer.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("client.id", "outbox-relay")
            .set("partitioner", &self.partitioner)
            .set(
                "message.timeout.ms",
                self.message_timeout.as_millis().to_string(),
            );
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        for (k, v) in FIXED.iter().filter(|(_, v)| !v.is_empty()) {
            c.set(*k, *v);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publishers::kit::options::assert_refused;

    /// The forms managed Kafka services ask for (docs/publishers-a.md):
    /// TLS, SASL PLAIN and SCRAM over TLS, a CA file. Each is accepted at
    /// start by librdkafka itself; a typo in a value is refused there.
    #[test]
    fn tls_and_sasl_forms_are_accepted_and_typos_refused() {
        for query in [
            "security.protocol=ssl",
            "security.protocol=ssl&ssl.ca.location=/etc/ssl/certs/ca-certificates.crt",
            "security.protocol=sasl_ssl&sasl.mechanism=PLAIN&sasl.username=u&sasl.password=p",
            "security.protocol=sasl_ssl&sasl.mechanism=SCRAM-SHA-256&sasl.username=u&sasl.password=p",
            "security.protocol=sasl_ssl&sasl.mechanism=SCRAM-SHA-512&sasl.username=u&sasl.password=p",
            "security.protocol=sasl_plaintext&sasl.mechanism=PLAIN&sasl.username=u&sasl.password=p",
        ] {
            let url = format!("kafka://broker.example:9093?{query}");
            if let Err(e) = KafkaConfig::from_url(&url) {
                panic!("{query}: {e}");
            }
        }
        assert_refused(
            KafkaConfig::from_url,
            &[
                ("kafka://k:9093?security.protocol=tls", "security.protocol"),
                (
                    "kafka://k:9093?ssl.endpoint.identification.algorithm=maybe",
                    "ssl.endpoint.identification.algorithm",
                ),
            ],
        );
        // A mechanism librdkafka does not know is refused when the producer
        // is made, which the relay does at start, before claiming.
        let scram = "kafka://k:9093?security.protocol=sasl_ssl&sasl.mechanism=SCRAM\
                     &sasl.username=user&sasl.password=hunter22";
        let e = super::super::KafkaPublisher::from_url(scram).unwrap_err();
        assert!(e.to_string().contains("SASL mechanism"), "{e}");
    }

    #[test]
    fn a_delivery_is_reported_before_the_relay_gives_up_on_it() {
        let d = crate::RelayConfig::default();
        assert!(DEFAULT_MESSAGE_TIMEOUT < d.publish_timeout);
        assert!(DEFAULT_MESSAGE_TIMEOUT * 10 <= d.lease);
        let c = KafkaConfig::from_url("kafka://k:9092").unwrap();
        assert_eq!(c.message_timeout, DEFAULT_MESSAGE_TIMEOUT);
    }

    #[test]
    fn parses_brokers_and_guards_the_guarantees() {
        let c = KafkaConfig::from_url(
            "kafka://k1:9092,k2:9093?message_timeout=5s&compression.type=lz4&sasl.password=pw",
        )
        .unwrap();
        assert_eq!(c.bootstrap_servers, "k1:9092,k2:9093");
        assert_eq!(c.message_timeout, Duration::from_secs(5));
        assert!(!format!("{c:?}").contains("pw"));
        let cc = c.client_config();
        assert_eq!(cc.get("enable.idempotence"), Some("true"));
        assert_eq!(cc.get("acks"), Some("all"));
        assert_eq!(cc.get("compression.type"), Some("lz4"));
        assert_eq!(cc.get("partitioner"), Some("murmur2_random"), "Java's");
        let c = KafkaConfig::from_url("kafka://k:9092?partitioner=consistent_random").unwrap();
        assert_eq!(
            c.client_config().get("partitioner"),
            Some("consistent_random")
        );
        assert_refused(
            KafkaConfig::from_url,
            &[
                ("kafka://k:9092?acks=1", "acks is set by the publisher"),
                (
                    "kafka://k:9092?enable.idempotence=false",
                    "enable.idempotence",
                ),
                ("kafka://k:9092,k2?x.y=1", "not host:port"),
                ("kafka://k:9092?linger=5", "unknown option"),
                ("kafka://k:9092?partitioner=murmur3", "partitioner"),
                ("kafka://k:9092?message.max.bytes=lots", "message.max.bytes"),
                ("kafka://k:9092?allow_reserved=maybe", "allow_reserved"),
                ("kafka://u:hunter2@k:9092", "sasl.password"),
                ("nats://u:hunter2@k:9092", "must start with kafka://"),
            ],
        );
    }
}
