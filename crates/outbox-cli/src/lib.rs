//! The library side of the `outbox` command: the effective configuration
//! (`config/`: defaults < TOML file < environment < flags, every value
//! checked) log setup (`logging`) and escaping for the terminal (`terminal`). The binary (`main.rs`, `cmd/`) is
//! built on it; the fuzz targets (`fuzz/`) call the loader and the value
//! parsers directly, without a process or a database.

pub mod config;
pub mod logging;
pub mod terminal;

/// A usage or configuration error a command found before running anything
/// (a missing `DATABASE_URL`, `archive` without an age, a value out of
/// range): `outbox` exits with 2 for it, as for a bad flag
/// (docs/operations.md, "Exit statuses").
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `Err` of a [`UsageError`] saying `message`.
pub fn usage<T>(message: impl std::fmt::Display) -> anyhow::Result<T> {
    Err(UsageError(message.to_string()).into())
}
