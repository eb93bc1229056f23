//! The concrete publishers, one folder each, each behind a Cargo feature.
//! [`AnyPublisher`] is what configuration builds from a `--publisher` URL.
//!
//! Layout: `<name>/mod.rs` is the publisher (what it sends and how it
//! classifies the broker's answers, and its [`Declaration`]: schemes,
//! options with their docs, how it is built), `<name>/config.rs` its URL
//! options; each keeps only what is specific to its broker, and the
//! registry below names it in one line. What they share is in
//! `kit/` (the URL and option parser with redaction, the envelope as a
//! record of fields, the lazy connection, batch outcomes) and `limits.rs`
//! (the checks against a destination's limits before sending).

mod kit;
mod limits;

use crate::redact::redact;
use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
use deadpool_postgres::Pool;
pub use kit::declare::{Declaration, Opt, PublisherSettings, Setting, ANY_DOTTED};
use outbox::Schema;

/// What a publisher may need from the relay's side when built from a URL.
#[derive(Debug, Clone)]
pub struct PublisherContext {
    /// The outbox database's pool (the `postgres` publisher writes there).
    pub pool: Pool,
    /// The outbox schema.
    pub schema: Schema,
    /// The relay id, recorded by sinks that keep one.
    pub relay_id: String,
    /// Values of the publishers' declared settings (the webhook's signing
    /// secret, timeout, ...); those not given take their defaults.
    pub settings: PublisherSettings,
}

/// The registry: one line per publisher (its Cargo feature, its folder,
/// its type, its variant of [`AnyPublisher`]). Everything else about a
/// publisher (schemes, options and their docs, how it is built) it
/// declares in its folder (`kit::declare::Declared`); from these lines come the
/// modules, the enum, the scheme match of `from_url` and `check_url`, the
/// list of declarations and the forwarding of [`Publisher`].
macro_rules! publishers {
    ($($feature:literal => $module:ident::$ty:ident as $variant:ident,)*) => {
        $(
            #[cfg(feature = $feature)]
            pub mod $module;
        )*

        /// Every publisher this build knows, chosen at run time from a
        /// `--publisher` value.
        #[derive(Debug)]
        #[non_exhaustive]
        pub enum AnyPublisher {
            $(
                #[cfg(feature = $feature)]
                #[doc = concat!("The `", stringify!($module), "` publisher.")]
                $variant($module::$ty),
            )*
            /// Never built: keeps the enum (and its matches) well-formed in
            /// a build with no publisher feature at all.
            #[doc(hidden)]
            None(std::convert::Infallible),
        }

        /// The declarations of the publishers this build has, in the
        /// registry's order.
        pub fn declarations() -> Vec<&'static Declaration> {
            vec![$(
                #[cfg(feature = $feature)]
                &<$module::$ty as kit::declare::Declared>::DECLARATION,
            )*]
        }

        impl AnyPublisher {
            /// Builds the publisher a `--publisher` value names: `postgres`
            /// (the outbox database) or a URL of one of the schemes of
            /// [`declarations`]. Nothing connects here: a broker that is
            /// down delays publishing, it does not stop the relay.
            #[allow(unused_variables)] // a build without publishers
            pub async fn from_url(url: &str, ctx: &PublisherContext) -> Result<Self> {
                let scheme = scheme_of(url);
                $(
                    #[cfg(feature = $feature)]
                    {
                        if <$module::$ty as kit::declare::Declared>::DECLARATION.claims(scheme) {
                            return Ok(Self::$variant(<$module::$ty as kit::declare::Declared>::build(url, ctx).await?));
                        }
                    }
                )*
                Err(unknown(url))
            }

            /// Checks `url` as [`AnyPublisher::from_url`] does (scheme,
            /// address, every option and its value), through the same
            /// parsers, without connecting or touching any database: what
            /// `outbox config check` runs, so it refuses exactly what the
            /// relay refuses. Kafka's producer is built and dropped, as
            /// librdkafka checks its pass-through properties only then.
            #[allow(unused_variables)] // a build without publishers
            pub fn check_url(url: &str) -> Result<()> {
                let scheme = scheme_of(url);
                $(
                    #[cfg(feature = $feature)]
                    {
                        if <$module::$ty as kit::declare::Declared>::DECLARATION.claims(scheme) {
                            return <$module::$ty as kit::declare::Declared>::check(url);
                        }
                    }
                )*
                Err(unknown(url))
            }
        }

        /// `$body` with `$p` bound to the publisher inside `$any`, whichever
        /// it is: the one match every `AnyPublisher` method forwards through.
        macro_rules! forward {
            ($any:expr, $p:ident => $body:expr) => {
                match $any {
                    $(
                        #[cfg(feature = $feature)]
                        AnyPublisher::$variant($p) => $body,
                    )*
                    AnyPublisher::None(never) => match *never {},
                }
            };
        }
    };
}

publishers! {
    "publisher-postgres" => postgres::PostgresPublisher as Postgres,
    "publisher-amqp" => amqp::AmqpPublisher as Amqp,
    "publisher-mqtt" => mqtt::MqttPublisher as Mqtt,
    "publisher-http" => http::HttpPublisher as Http,
    "publisher-redis" => redis::RedisPublisher as Redis,
    "publisher-asynq" => asynq::AsynqPublisher as Asynq,
    "publisher-nats" => nats::NatsPublisher as Nats,
    "publisher-kafka" => kafka::KafkaPublisher as Kafka,
}

/// The scheme of a `--publisher` value (all of it for `postgres`).
fn scheme_of(url: &str) -> &str {
    url.split_once("://").map_or(url, |(s, _)| s)
}

/// What help texts and errors list: `postgres`, `amqp://`, …, for this build.
pub fn prefixes() -> Vec<String> {
    declarations().iter().flat_map(|d| d.prefixes()).collect()
}

/// The error for a scheme this build does not know, listing those it does.
fn unknown(url: &str) -> Error {
    Error::publisher(format!(
        "unknown publisher {:?}: this build accepts {}",
        redact(url),
        prefixes().join(", ")
    ))
}

impl Publisher for AnyPublisher {
    fn name(&self) -> &str {
        forward!(self, p => p.name())
    }

    // A build without any publisher feature has no arm that reads `batch`.
    #[allow(unused_variables)]
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        forward!(self, p => p.publish(batch).await)
    }

    #[allow(unused_variables)]
    async fn publish_reporting(
        &self,
        batch: &[Message],
        accepted: &crate::Accepted,
    ) -> Vec<Outcome> {
        forward!(self, p => p.publish_reporting(batch, accepted).await)
    }

    fn batch_order(&self) -> crate::BatchOrder {
        forward!(self, p => p.batch_order())
    }

    async fn check(&self) -> Result<(), PublishError> {
        forward!(self, p => p.check().await)
    }
}

#[cfg(test)]
mod tests {
    use super::{AnyPublisher, PublisherContext};
    use crate::redact::redact;

    fn ctx() -> PublisherContext {
        PublisherContext {
            // Building a pool does not connect.
            pool: crate::pool("postgres://nobody@127.0.0.1:1/none", 1).unwrap(),
            schema: outbox::Schema::new("outbox").unwrap(),
            relay_id: "test".into(),
            settings: super::PublisherSettings::new(),
        }
    }

    /// Each scheme this build accepts picks its publisher; an unknown one
    /// lists them all (and not the URL's password).
    #[tokio::test]
    async fn schemes_choose_the_publisher_and_unknown_ones_list_the_choices() {
        let ctx = ctx();
        let built = |url: &str| {
            let scheme = &url[..url.find("://").unwrap()];
            super::declarations()
                .iter()
                .any(|d| d.schemes.contains(&scheme))
        };
        for (url, name) in [
            ("amqp://guest:guest@127.0.0.1:1/%2f", "amqp"),
            ("mqtt://127.0.0.1:1", "mqtt"),
            ("http://127.0.0.1:1/hook", "http"),
            ("https://127.0.0.1:1/hook", "http"),
            ("redis://127.0.0.1:1/0?stream_prefix=app.", "redis"),
            ("asynq://127.0.0.1:1?queue=critical", "asynq"),
            ("nats://127.0.0.1:1?subject_prefix=app.", "nats"),
            ("kafka://127.0.0.1:1,127.0.0.1:2", "kafka"),
        ] {
            if built(url) {
                let p = AnyPublisher::from_url(url, &ctx).await.unwrap();
                assert_eq!(crate::Publisher::name(&p), name);
            }
        }
        let e = AnyPublisher::from_url("kafkaa://u:pw@h", &ctx)
            .await
            .unwrap_err()
            .to_string();
        for prefix in super::prefixes() {
            assert!(e.contains(&prefix), "{prefix}: {e}");
        }
        assert!(!e.contains(":pw@"), "{e}");
    }

    /// A URL of `scheme` that its publisher accepts with no option.
    fn base_url(scheme: &str) -> String {
        match scheme {
            "postgres" | "postgresql" => format!("{scheme}://nobody@127.0.0.1:1/none"),
            "amqp" => "amqp://guest:guest@127.0.0.1:1/%2f".into(),
            "http" | "https" => format!("{scheme}://127.0.0.1:1/hook"),
            s => format!("{s}://127.0.0.1:1"),
        }
    }

    /// `config check` (`check_url`) and the relay (`from_url`) cannot
    /// disagree: every scheme of every declaration, bare and with each
    /// documented option at a handful of values, is accepted by both or
    /// refused by both, with the same error; an undocumented option and a
    /// scheme declared as not served are refused by both.
    #[tokio::test]
    async fn check_url_and_from_url_agree_on_every_scheme_and_option() {
        let ctx = ctx();
        let mut tried = 0;
        for d in super::declarations() {
            let mut urls = Vec::new();
            for scheme in d.schemes {
                let base = base_url(scheme);
                urls.push(base.clone());
                let sep = if base.contains('?') { '&' } else { '?' };
                // The webhook's query is the endpoint's: no option of ours.
                if d.options.is_empty() {
                    continue;
                }
                urls.push(format!("{base}{sep}no_such_option=1"));
                for o in d.options {
                    for name in o.names {
                        let name = if *name == super::ANY_DOTTED {
                            "linger.ms"
                        } else {
                            name
                        };
                        for v in ["", "0", "1", "true", "5s", "app.", "x y", "%00"] {
                            urls.push(format!("{base}{sep}{name}={v}"));
                        }
                    }
                }
            }
            for (scheme, _) in d.not_served {
                urls.push(format!("{scheme}://127.0.0.1:1"));
            }
            for url in urls {
                let checked = AnyPublisher::check_url(&url).map_err(|e| e.to_string());
                // The postgres sink opens its database to create its table:
                // a refused connection means the configuration passed.
                let built = match AnyPublisher::from_url(&url, &ctx).await {
                    Ok(_) | Err(crate::Error::Pool(_) | crate::Error::Database(_)) => Ok(()),
                    Err(e) => Err(e.to_string()),
                };
                assert_eq!(checked, built, "{url}");
                if url.contains("no_such_option")
                    || d.not_served.iter().any(|(s, _)| url.starts_with(s))
                {
                    assert!(checked.is_err(), "{url}");
                }
                tried += 1;
            }
        }
        assert!(tried > 100, "{tried}");
    }

    /// Each option table in docs/publishers-*.md is its publisher's
    /// declaration, rendered: an option is documented exactly when it is
    /// accepted.
    #[test]
    fn the_docs_option_tables_are_the_declarations() {
        let docs: String = ["publishers-a.md", "publishers-b.md"]
            .iter()
            .map(|f| {
                std::fs::read_to_string(format!("{}/../../docs/{f}", env!("CARGO_MANIFEST_DIR")))
                    .unwrap()
            })
            .collect();
        for d in super::declarations()
            .into_iter()
            .filter(|d| !d.options.is_empty())
        {
            let table = d.table();
            assert!(
                docs.contains(&table),
                "docs/publishers-*.md lacks the {} options as declared; the table should read:\n{table}",
                d.name
            );
        }
        for d in super::declarations()
            .into_iter()
            .filter(|d| !d.settings.is_empty())
        {
            let table = d.settings_table();
            assert!(
                docs.contains(&table),
                "docs/publishers-*.md lacks the {} settings as declared; the table should read:\n{table}",
                d.name
            );
        }
    }

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact("postgres"), "postgres");
        assert!(!redact("amqp://u:p%40ss@h/").contains("p%40ss"));
    }
}
