use super::parse_duration;
use crate::config::Settings;
use indicatif::{ProgressBar, ProgressStyle};
use outbox_cli::usage;
use outbox_relay::archive::Config;
use outbox_relay::{Admin, Archiver, Store};
use std::io::IsTerminal;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `outbox archive`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Take rows sent (or, with --include-dead, gone dead) longer ago than
    /// this, e.g. 7d [default: archive_after from the configuration].
    #[arg(long, value_parser = parse_duration)]
    older_than: Option<Duration>,
    /// Delete the rows instead of moving them to archived_messages.
    #[arg(long)]
    delete: bool,
    /// Also take dead rows (by dead_at); by default they stay for `outbox dead`.
    #[arg(long)]
    include_dead: bool,
    /// Rows per batch; each batch is one short transaction.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let Some(older_than) = args.older_than.or(settings.relay.archive_after) else {
        return usage("archive needs --older-than (e.g. --older-than 7d) or archive_after in the configuration");
    };
    let config = Config {
        older_than,
        batch_size: args.batch_size,
        delete: args.delete,
        include_dead: args.include_dead,
    };
    if let Err(e) = config.validate() {
        return usage(e);
    }
    let url = crate::db::require_url(settings.database_url.clone())?;
    let pool = crate::db::connect(&url, 2).await?;
    let store = Store::new(pool, settings.schema.clone());
    Admin::new(store.clone()).check_migrated().await?;
    let archiver = Archiver::new(store, config)?;

    // The bar needs a count, which costs a scan: only for a person watching.
    let bar = if std::io::stdout().is_terminal() {
        let eligible = archiver.eligible().await?;
        let bar = ProgressBar::new(eligible.total());
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} rows  {per_sec}  eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    // Ctrl-C stops between batches: every finished batch is committed, so
    // the count printed is exactly what was done.
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let stats = archiver
        .run_once_with(Some(&shutdown), |s| {
            // Rows may age past the cutoff after the count was taken.
            if s.total() > bar.length().unwrap_or(0) {
                bar.set_length(s.total());
            }
            bar.set_position(s.total());
        })
        .await?;
    bar.finish_and_clear();
    if shutdown.is_cancelled() {
        eprintln!("interrupted: stopped after the last complete batch");
    }
    let verb = if args.delete { "deleted" } else { "archived" };
    println!("{verb}={}", stats.total());
    Ok(())
}
