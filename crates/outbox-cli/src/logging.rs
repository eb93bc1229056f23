//! Logging: `tracing` to stderr, levels from `RUST_LOG` (default `warn`),
//! as text for people or as one JSON object per line for log shippers.
//! Nothing logged carries a password: URLs go through `redact_url` before
//! they reach a message, and the settings are never logged whole.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// The shape of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}
