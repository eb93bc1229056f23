//! `redis://host:port[/db]?stream_prefix=…&maxlen=…&max_message_size=…&allow_reserved=true`
//!
//! `max_message_size` (bytes, default 536870912, Redis's
//! `proto-max-bulk-len`) bounds an entry's stream name and fields together:
//! a larger one is refused before sending, as the server would close the
//! connection under the whole pipeline. Streams starting with `asynq:` (the
//! asynq publisher's keys, which may share the server) are refused,
//! permanently, unless the URL says `allow_reserved=true`.

use crate::publishers::kit::declare::{Declaration, Opt};
use crate::publishers::kit::options::UrlOptions;
use crate::Result;
use std::time::Duration;

/// Options of the Redis Streams publisher.
#[derive(Clone)]
pub struct RedisConfig {
    /// The server and how long to wait on it.
    pub server: RedisServer,
    /// Prepended to the topic to name the stream (default: none).
    pub stream_prefix: String,
    /// Trim each stream to about this many entries (`MAXLEN ~ N`).
    pub maxlen: Option<u64>,
    /// The largest entry sent (`max_message_size`, bytes).
    pub max_message_size: usize,
    /// Let streams start with `asynq:` (`allow_reserved`, default false).
    pub allow_reserved: bool,
}

/// The part of a `redis://` or `asynq://` URL that says which server and
/// how long to wait on it: read by one parser for both publishers, whose
/// URLs take the same connection options.
#[derive(Clone)]
pub struct RedisServer {
    /// The server URL without options (may hold a password: never printed).
    pub(crate) url: url::Url,
    /// Give up opening a connection after this long (`connect_timeout`, default 5s).
    pub connect_timeout: Duration,
    /// Give up waiting for a reply after this long (`timeout`, default 30s).
    pub response_timeout: Duration,
}

// Shown as the redacted URL alone, as the configs showed their server
// before they shared this type.
impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&crate::redact::redact(self.url.as_str()), f)
    }
}

impl RedisServer {
    /// The server of options `o`, at `url` (their base, or that base
    /// rewritten to the `redis://` scheme), with its connection options.
    pub(crate) fn from_options(o: &UrlOptions, url: url::Url) -> Result<Self> {
        check_db(o)?;
        Ok(Self {
            url,
            connect_timeout: o.duration_or("connect_timeout", Duration::from_secs(5))?,
            response_timeout: o.duration_or("timeout", Duration::from_secs(30))?,
        })
    }
}

crate::debug::debug_showing!(RedisConfig {
    server,
    stream_prefix,
    maxlen,
    ..
});

/// Redis's default `proto-max-bulk-len`: the largest argument it reads.
pub const PROTO_MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// Key prefixes of the asynq layout, which may share the server.
pub(crate) const RESERVED: [&str; 1] = ["asynq:"];


/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "redis",
    schemes: &["redis"],
    not_served: &[("rediss", "rediss (TLS) is not supported by this build")],
    settings: &[],
    summary: "Redis Streams",
    options: &[
        Opt::new(
            &["stream_prefix"],
            "none",
            "the stream is `<stream_prefix><topic>`",
        ),
        Opt::new(
            &["maxlen"],
            "none (keep all)",
            "`XADD … MAXLEN ~ N`: trim each stream to about N entries",
        ),
        Opt::new(
            &["connect_timeout"],
            "`5s`",
            "give up opening the connection",
        ),
        Opt::new(
            &["timeout"],
            "`30s`",
            "give up waiting for a reply",
        ),
        Opt::new(
            &["max_message_size"],
            "`536870912`",
            "refuse (permanent, that message alone) an entry whose stream name and fields exceed this many bytes; Redis's `proto-max-bulk-len`, past which it closes the connection under the whole pipeline",
        ),
        Opt::new(
            &["allow_reserved"],
            "`false`",
            "allow streams starting with `asynq:` (the asynq layout on the same server), refused otherwise",
        ),
    ],
};

impl RedisConfig {
    /// Parses and validates a `redis://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        let o = UrlOptions::declared(&DECLARATION, url)?;
        let server = RedisServer::from_options(&o, o.base.clone())?;
        let maxlen = o.parsed::<u64>("maxlen", "a positive whole number of entries")?;
        if maxlen == Some(0) {
            return Err(
                o.error("option maxlen=0 would empty every stream; omit it to keep all entries")
            );
        }
        let max_message_size = o
            .parsed::<usize>("max_message_size", "a number of bytes")?
            .unwrap_or(PROTO_MAX_BULK_LEN);
        let allow_reserved = o.allow_reserved()?;
        Ok(Self {
            max_message_size,
            allow_reserved,
            stream_prefix: o.get("stream_prefix").unwrap_or_default().to_owned(),
            maxlen,
            server,
        })
    }

    /// The stream a topic is written to.
    pub fn stream(&self, topic: &str) -> String {
        format!("{}{topic}", self.stream_prefix)
    }
}

/// The database number, if any, must be a number.
fn check_db(o: &UrlOptions) -> Result<()> {
    let path = o.base.path().trim_start_matches('/');
    if !path.is_empty() && path.parse::<u32>().is_err() {
        return Err(o.error(format!(
            "the path /{path} must be a database number such as /0"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publishers::kit::options::assert_refused;

    #[test]
    fn parses_options_and_refuses_bad_ones() {
        let c =
            RedisConfig::from_url("redis://:pw@127.0.0.1:6379/2?stream_prefix=app.&maxlen=1000")
                .unwrap();
        assert_eq!(c.stream("orders"), "app.orders");
        assert_eq!(c.maxlen, Some(1000));
        assert!(!format!("{c:?}").contains("pw"));
        assert_refused(
            RedisConfig::from_url,
            &[
                ("redis://h?maxlen=0", "maxlen=0"),
                ("redis://h?maxlen=lots", "maxlen=\"lots\""),
                ("redis://h/x", "database number"),
                ("redis://h?stream=x", "unknown option"),
                ("redis://h?timeout=5", "duration"),
                ("redis://h?max_message_size=big", "max_message_size"),
                ("redis://h?allow_reserved=maybe", "allow_reserved"),
            ],
        );
    }
}
