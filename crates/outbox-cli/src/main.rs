//! `outbox`: migrate, relay, stats and the seed's demo. Parsing lives here;
//! each subcommand is one file in `cmd/`.

mod cmd;
mod db;
mod embedded;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// A transactional outbox for PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about, propagate_version = true)]
struct Cli {
    /// PostgreSQL URL of the outbox database.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// Schema holding the outbox tables.
    #[arg(long, env = "OUTBOX_SCHEMA", global = true, default_value = outbox::DEFAULT_SCHEMA)]
    schema: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or upgrade the outbox schema (idempotent).
    Migrate(cmd::migrate::Args),
    /// Publish committed messages until SIGINT/SIGTERM (or one pass with --once).
    Relay(cmd::relay::Args),
    /// Counts by status and the age of the oldest pending message.
    Stats(cmd::stats::Args),
    /// The seed lab, reproduced: create-order, relay, crash-window, consume, tour.
    Demo(cmd::demo::Args),
    /// Throughput against the reference algorithms, on the same backlog.
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let schema = outbox::Schema::new(&cli.schema)?;
    let url = cli.database_url;
    match cli.command {
        Command::Migrate(args) => cmd::migrate::run(url, schema, args).await,
        Command::Relay(args) => cmd::relay::run(url, schema, args).await,
        Command::Stats(args) => cmd::stats::run(url, schema, args).await,
        Command::Demo(args) => cmd::demo::run(url, schema, args).await,
        Command::Bench(args) => cmd::bench::run(url, args).await,
    }
}
