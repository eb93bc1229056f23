pub mod archive;
pub mod bench;
pub mod config;
pub mod dead;
pub mod demo;
pub mod grants;
pub mod migrate;
pub mod relay;
pub mod stats;
pub mod ui;

pub use outbox_cli::config::parse::parse_duration;
