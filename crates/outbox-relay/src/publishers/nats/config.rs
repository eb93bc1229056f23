//! `nats://host:port[,host:port]?subject_prefix=…&create_stream=NAME&ack_timeout=…&allow_reserved=true`
//!
//! Subjects starting with `$` (`$JS.API.…`, `$SYS.…`, `$KV.…`, `$O.…`) or
//! `_INBOX.` address the server itself or other clients' replies: a message
//! whose subject is one of them is refused, permanently, unless the URL says
//! `allow_reserved=true`. With a `subject_prefix`, the prefix starts every
//! subject, so only a prefix of that form could reach them.

use crate::publishers::kit::declare::{Declaration, Opt};
use crate::publishers::kit::options::UrlOptions;
use crate::publishers::limits;
use crate::Result;
use std::time::Duration;

/// Options of the NATS JetStream publisher.
#[derive(Clone)]
pub struct NatsConfig {
    /// The server list as async-nats takes it (may hold credentials: never printed).
    pub(crate) servers: String,
    /// Prepended to the topic to make the subject (default: none).
    pub subject_prefix: String,
    /// Create (or reuse) a stream of this name capturing `<subject_prefix>>`.
    pub create_stream: Option<String>,
    /// Wait this long for each PubAck (`ack_timeout`, default 10s).
    pub ack_timeout: Duration,
    /// Give up opening a connection after this long (`connect_timeout`, default 5s).
    pub connect_timeout: Duration,
    /// The CloudEvents `source` attribute (`source`, default `/outbox`).
    pub source: String,
    /// Let subjects start with `$` or `_INBOX.` (`allow_reserved`, default false).
    pub allow_reserved: bool,
}

crate::debug::debug_showing!(NatsConfig {
    servers: crate::redact::redact,
    subject_prefix,
    create_stream,
    ..
});

/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "nats",
    schemes: &["nats"],
    not_served: &[],
    settings: &[],
    summary: "NATS JetStream",
    options: &[
        Opt::new(
            &["subject_prefix"],
            "none",
            "the subject is `<subject_prefix><topic>`",
        ),
        Opt::new(
            &["create_stream"],
            "none",
            "create (or reuse) a stream of this name capturing `<subject_prefix>>`; needs a prefix ending in `.`",
        ),
        Opt::new(
            &["ack_timeout"],
            "`10s`",
            "wait this long for each PubAck",
        ),
        Opt::new(
            &["connect_timeout"],
            "`5s`",
            "give up opening the connection",
        ),
        Opt::new(
            &["source"],
            "`/outbox`",
            "the CloudEvents `source` attribute",
        ),
        Opt::new(
            &["allow_reserved"],
            "`false`",
            "allow subjects starting with `$` (`$JS.API.…`, `$SYS.…`, `$KV.…`, `$O.…`) or `_INBOX.`, refused otherwise: with no prefix, a topic `$JS.API.STREAM.DELETE.X` is a request that deletes stream X",
        ),
    ],
};

impl NatsConfig {
    /// Parses and validates a `nats://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        // Several servers are comma-separated; check the first as a URL and
        // hand the whole list to async-nats.
        let (servers, query) = url.split_once('?').unwrap_or((url, ""));
        let first = servers.split(',').next().unwrap_or_default();
        let o = UrlOptions::declared(&DECLARATION, &format!("{first}?{query}"))?;
        // The rest of the list through async-nats's own parser, now: a bad
        // entry would otherwise surface only as a connection failure.
        for server in servers.split(',').skip(1) {
            let ok = server
                .parse::<async_nats::ServerAddr>()
                .is_ok_and(|a| !a.host().is_empty());
            if !ok {
                return Err(o.error(format!(
                    "{:?} in the server list is not a host:port; list servers as \
                     nats://host:port,host:port",
                    crate::redact::redact(server)
                )));
            }
        }
        if !matches!(o.base.path(), "" | "/") {
            return Err(o.error("the URL takes no path; the subject comes from the topic"));
        }
        let subject_prefix = o.get("subject_prefix").unwrap_or_default().to_owned();
        if subject_prefix.contains(|c: char| c.is_whitespace() || c == '*' || c == '>') {
            return Err(o.error(format!(
                "subject_prefix {subject_prefix:?} may not hold spaces or wildcards"
            )));
        }
        let create_stream = o.get("create_stream").map(str::to_owned);
        if let Some(name) = &create_stream {
            if name.is_empty() || name.contains(|c: char| c.is_whitespace() || ".*>/\\".contains(c))
            {
                return Err(o.error(format!(
                    "create_stream={name:?} is not a valid stream name (no spaces, dots, wildcards or slashes)"
                )));
            }
            if !subject_prefix.ends_with('.') {
                return Err(o.error(
                    "create_stream needs a subject_prefix ending in '.' (the stream captures <subject_prefix>>)",
                ));
            }
        }
        let allow_reserved = o.allow_reserved()?;
        // Checked here, not only per message: a prefix of that form would
        // send every message to dead.
        if !allow_reserved && RESERVED.iter().any(|p| subject_prefix.starts_with(p)) {
            return Err(o.error(format!(
                "subject_prefix {subject_prefix:?} addresses the server's reserved subjects ($…, _INBOX.…); \
                 add {}=true to mean it",
                limits::ALLOW_RESERVED
            )));
        }
        Ok(Self {
            allow_reserved,
            servers: servers.to_owned(),
            subject_prefix,
            create_stream,
            ack_timeout: o.duration_or("ack_timeout", Duration::from_secs(10))?,
            connect_timeout: o.duration_or("connect_timeout", Duration::from_secs(5))?,
            source: o.source(),
        })
    }

    /// The subject a topic is published to.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}{topic}", self.subject_prefix)
    }
}

/// Prefixes of the subjects the server itself serves: `$JS.API.…` (stream
/// and consumer management: a message there is a request, so a topic
/// `$JS.API.STREAM.DELETE.X` deletes stream X), `$SYS.…`, `$KV.…`, `$O.…`
/// and the rest of `$`, and `_INBOX.…` (other clients' replies).
pub(crate) const RESERVED: [&str; 2] = ["$", "_INBOX."];

/// Whether `s` is a subject one can publish to: non-empty tokens, no
/// whitespace or control characters (the protocol line is split on spaces
/// and tabs), no wildcards.
pub(crate) fn valid_subject(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|t| {
            !t.is_empty()
                && t != "*"
                && t != ">"
                && !t.contains(|c: char| c.is_whitespace() || c.is_control())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publishers::kit::options::assert_refused;

    #[test]
    fn parses_options_and_refuses_bad_ones() {
        let c = NatsConfig::from_url(
            "nats://u:pw@h1:4222,h2:4222?subject_prefix=app.&create_stream=APP",
        )
        .unwrap();
        assert_eq!(c.subject("orders"), "app.orders");
        assert_eq!(c.create_stream.as_deref(), Some("APP"));
        assert_eq!(c.servers, "nats://u:pw@h1:4222,h2:4222");
        assert!(!format!("{c:?}").contains("pw"));
        assert_refused(
            NatsConfig::from_url,
            &[
                ("nats://h?create_stream=APP", "subject_prefix ending in '.'"),
                (
                    "nats://h?subject_prefix=a.&create_stream=A.B",
                    "not a valid stream name",
                ),
                ("nats://h/orders", "no path"),
                ("nats://h?subject=x", "unknown option"),
                ("nats://h?allow_reserved=maybe", "must be true or false"),
                ("nats://h?subject_prefix=$JS.", "allow_reserved=true"),
                ("nats://h:1,:2", "server list"),
                ("nats://h:1,h2:x", "server list"),
                ("nats://h:1,h2:99999", "server list"),
            ],
        );
        assert!(
            NatsConfig::from_url("nats://h?subject_prefix=$JS.&allow_reserved=true")
                .unwrap()
                .allow_reserved
        );
        assert!(!valid_subject("a\tb") && !valid_subject("a\u{0}b"));
        assert!(valid_subject("app.orders") && !valid_subject("app..x") && !valid_subject("a b"));
    }
}
