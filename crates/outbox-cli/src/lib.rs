//! The library side of the `outbox` command: the effective configuration
//! (`config/`: defaults < TOML file < environment < flags, every value
//! checked) log setup (`logging`) and escaping for the terminal (`terminal`). The binary (`main.rs`, `cmd/`) is
//! built on it; the fuzz targets (`fuzz/`) call the loader and the value
//! parsers directly, without a process or a database.

pub mod config;
pub mod logging;
pub mod terminal;
