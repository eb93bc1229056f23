//! `outbox`: migrate, relay, stats, dead-letter handling, archiving, config,
//! the operator page and the seed's demo. Parsing lives here; each
//! subcommand is one file in `cmd/` (the demo a folder, `cmd/demo/`, with
//! its own statements on its business table in `sql.rs`); the effective
//! configuration (file < env < flags) in `config/`; the relay's HTTP server
//! in `http.rs`, and the operator page it and `outbox ui` serve in `ui/`.
//! The CLI holds no SQL of the engine, whose store is private: it reads
//! through `outbox_relay::Admin` (migrations, counts, the page's snapshot),
//! `DeadLetters` and `Archiver`, and runs `Relay` and the publishers.

mod cmd;
mod db;
mod http;
mod ui;

use outbox_cli::{config, logging};

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// A transactional outbox for PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about, propagate_version = true)]
struct Cli {
    // Help, variable and default from the config table; no clap `env =`
    // here: the config loader reads the environment itself so it can tell
    // where each value came from.
    #[arg(long, global = true, help = config::help_line("database_url"))]
    database_url: Option<String>,
    #[arg(long, global = true, help = config::help_line("schema"))]
    schema: Option<String>,
    /// TOML configuration file; environment variables and flags override it.
    #[arg(long, env = "OUTBOX_CONFIG", hide_env_values = true, global = true)]
    config: Option<PathBuf>,
    #[arg(long, global = true, help = config::help_line("log_format"))]
    log_format: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or upgrade the outbox schema (idempotent).
    Migrate(cmd::migrate::Args),
    /// Publish committed messages until SIGINT/SIGTERM (or one pass with --once).
    Relay(cmd::relay::Args),
    /// Counts by status and topic (archived rows too), the age of the oldest
    /// pending message; can fail past an age, for cron alerting.
    Stats(cmd::stats::Args),
    /// Dead-letter handling: list, show, replay, purge.
    Dead(cmd::dead::Args),
    /// Move (or delete) old sent rows out of the live tables.
    Archive(cmd::archive::Args),
    /// Show the effective configuration and where each value came from.
    Config(cmd::config::Args),
    /// The seed lab, reproduced: create-order, relay, crash-window, consume, tour.
    Demo(cmd::demo::Args),
    /// Throughput against the reference algorithms, on the same backlog.
    Bench(cmd::bench::Args),
    /// The least-privilege GRANTs for a producer role and a relay role.
    Grants(cmd::grants::Args),
    /// The operator page: counts, throughput, relays and dead letters, live
    /// in a browser; replay and purge with OUTBOX_UI_TOKEN.
    Ui(cmd::ui::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every command checks the whole configuration first, so a bad value
    // fails before anything is written (and before logging is set up, as
    // the log format is part of it).
    // Exit codes: 0 done, 1 a runtime error, 2 a usage or configuration
    // error (clap's own code for a bad flag).
    let settings = match load_settings(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // The demo stages a crash on purpose: the warnings a real one deserves
    // (a lease recovered) would only interrupt the lab's own lines.
    let default_filter = match cli.command {
        Command::Demo(_) => "error",
        _ => logging::DEFAULT_FILTER,
    };
    logging::init(settings.log_format, default_filter);
    // One thread: the relay waits on the database and the broker, and its
    // own work per message is a few microseconds. A multi-threaded runtime
    // spent more on waking tasks across threads than it saved (measured:
    // drain 54-62k msg/s against 63-70k on one thread, 2 cores).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A reader that goes away (`outbox dead list | head -1`) makes the next
    // print panic on EPIPE: that panic is silent and unwinds (so a
    // throwaway PostgreSQL is still stopped and removed), and the command
    // ends as if SIGPIPE had killed it, with 141.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !panic_text(info.payload()).is_some_and(is_broken_pipe) {
            default_hook(info);
        }
    }));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(run(cli, settings))
    }));
    match ran {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) if e.is::<Interrupted>() => {
            eprintln!("{e}");
            ExitCode::from(130)
        }
        Ok(Err(e)) if e.is::<outbox_cli::UsageError>() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Ok(Err(e)) => {
            eprintln!("error: {}", outbox_relay::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
        Err(p) => {
            if panic_text(&*p).is_some_and(is_broken_pipe) {
                ExitCode::from(141)
            } else {
                std::panic::resume_unwind(p)
            }
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

fn is_broken_pipe(panic: &str) -> bool {
    panic.starts_with("failed printing to std") && panic.contains("Broken pipe")
}

/// SIGINT or SIGTERM stopped a command that has no shutdown of its own;
/// `removed` says what it took away on the way out, if anything.
#[derive(Debug, Default)]
struct Interrupted {
    removed: Option<String>,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted; stopped cleanly")?;
        match &self.removed {
            Some(r) => write!(f, ": {r}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Interrupted {}

/// Runs `work` until SIGINT or SIGTERM; then drops it, so what it started
/// (a throwaway PostgreSQL, a relay process) is stopped and removed.
async fn until_signal(
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    tokio::select! {
        r = work => r,
        _ = term.recv() => Err(Interrupted::default().into()),
        _ = int.recv() => Err(Interrupted::default().into()),
    }
}

fn load_settings(cli: &Cli) -> Result<config::Settings, config::ConfigErrors> {
    let mut flags = Vec::new();
    if let Some(u) = &cli.database_url {
        flags.push(("database_url", u.clone()));
    }
    if let Some(s) = &cli.schema {
        flags.push(("schema", s.clone()));
    }
    if let Some(f) = &cli.log_format {
        flags.push(("log_format", f.clone()));
    }
    match &cli.command {
        Command::Relay(a) => flags.extend(a.flags.pairs()),
        Command::Config(a) => flags.extend(a.flags()),
        _ => {}
    }
    config::load(cli.config.as_deref(), &flags, |k| std::env::var(k).ok())
}

async fn run(cli: Cli, settings: config::Settings) -> anyhow::Result<()> {
    let url = settings.database_url.clone();
    let schema = settings.schema.clone();
    match cli.command {
        Command::Migrate(args) => cmd::migrate::run(url, schema, args).await,
        Command::Relay(args) => cmd::relay::run(&settings, args).await,
        Command::Stats(args) => cmd::stats::run(url, schema, args).await,
        Command::Dead(args) => cmd::dead::run(url, schema, args).await,
        Command::Archive(args) => cmd::archive::run(&settings, args).await,
        Command::Config(args) => cmd::config::run(&settings, args),
        // They may run on a throwaway PostgreSQL, removed as they return.
        Command::Demo(args) => until_signal(cmd::demo::run(url, schema, args)).await,
        // The bench also cancels its statements and drops its schemas.
        Command::Bench(args) => cmd::bench::run(url, args).await,
        Command::Grants(args) => cmd::grants::run(url, schema, args).await,
        Command::Ui(args) => cmd::ui::run(&settings, args).await,
    }
}
