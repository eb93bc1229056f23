//! Every integration test of this crate, in one binary: one link, not one
//! per file. Each module is what a file under tests/ was (its name is the
//! filter: `cargo test -p outbox-cli --test it MODULE`).

mod cli;
mod cli_archive;
mod cli_bench;
mod cli_config;
mod cli_dead;
mod cli_exit_codes;
mod cli_grants;
mod cli_hardening;
mod cli_lifecycle;
mod cli_migrate;
mod cli_observability;
mod cli_schema_version;
mod cli_secrets;
mod cli_sink;
mod cli_stats;
mod cli_ui;
mod cli_ui_fanout;
mod cli_ui_hostile;
mod common;
mod fault_brokers;
mod fault_failover;
mod fault_kill9;
mod fault_network;
mod fault_ordering;
mod fault_partition;
mod fault_pg_restart;
mod parser_properties;
mod pgbouncer;
mod readme;
mod readme_sql;
mod relay_brokers;
mod relay_kafka;
mod relay_streams;
mod row_space;
mod tls;
mod ui_browser;
