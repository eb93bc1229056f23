//! Logging: `tracing` to stderr, levels from `RUST_LOG` (default `warn`),
//! as text for people or as one JSON object per line for log shippers.
//! Nothing logged carries a password: URLs go through `redact` before
//! they reach a message, and the settings are never logged whole.

use std::io::IsTerminal;
use tracing::{Level, Metadata};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// The shape of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable, coloured on a terminal.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}

/// What shows without RUST_LOG: warnings and errors from everything, and
/// from the CLI itself the few lines that say what it is doing (the
/// relay's start and stop), from the binary's own modules (`outbox::cmd`,
/// `outbox::http`).
pub const DEFAULT_FILTER: &str = "warn,outbox::cmd=info,outbox::http=info,outbox::ui=info";

/// Installs the global subscriber; `default` is the filter without RUST_LOG.
pub fn init(format: LogFormat, default: &str) {
    // An empty RUST_LOG counts as unset, as shells often export them so.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .finish()
            .with(filter_fn(shows_no_credentials))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .finish()
            .with(filter_fn(shows_no_credentials))
            .init(),
    }
}

/// Broker clients log what they send and receive, credentials included:
/// async-nats `Debug`s its CONNECT (with `pass` and `auth_token`) and its
/// options, lapin traces every frame (the SASL `PLAIN` response holds the
/// password). Whatever `RUST_LOG` asks for, those targets say no more than
/// `info`; anyone debugging a broker connection still sees its errors.
fn shows_no_credentials(meta: &Metadata<'_>) -> bool {
    const WIRE_LOGGERS: [&str; 5] = ["async_nats", "lapin", "amq_protocol", "rumqttc", "redis"];
    let chatty = *meta.level() > Level::INFO;
    !(chatty
        && WIRE_LOGGERS.iter().any(|t| {
            meta.target()
                .strip_prefix(t)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        }))
}
