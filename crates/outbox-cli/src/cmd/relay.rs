use super::parse_duration;
use outbox::Schema;
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_relay::{Relay, RelayConfig, RetryPolicy, Store};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `outbox relay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run one pass (claim, publish, settle) and print its counts.
    #[arg(long)]
    once: bool,
    /// Where to publish: `postgres` (the outbox database's published_events)
    /// or `postgres://…` (another database).
    #[arg(
        long,
        env = "OUTBOX_PUBLISHER",
        default_value = "postgres",
        hide_env_values = true
    )]
    publisher: String,
    /// Messages claimed per batch (1..=10000).
    #[arg(long, env = "OUTBOX_BATCH_SIZE", default_value_t = 500)]
    batch_size: usize,
    /// A claim older than this is presumed dead and its rows go back to pending.
    #[arg(long, env = "OUTBOX_LEASE", default_value = "5m", value_parser = parse_duration)]
    lease: Duration,
    /// Attempts before a message goes to dead.
    #[arg(long, env = "OUTBOX_MAX_ATTEMPTS", default_value_t = 10)]
    max_attempts: i32,
    /// Identifies this relay in `locked_by` (default: host-pid-random).
    #[arg(long, env = "OUTBOX_RELAY_ID")]
    relay_id: Option<String>,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let url = crate::db::require_url(url)?;
    let pool = crate::db::connect(&url, 4).await?;
    let store = Store::new(pool.clone(), schema.clone());
    store.check_migrated().await?;
    let mut config = RelayConfig {
        batch_size: args.batch_size,
        lease: args.lease,
        retry: RetryPolicy {
            max_attempts: args.max_attempts,
            ..RetryPolicy::default()
        },
        ..RelayConfig::default()
    };
    if let Some(id) = args.relay_id {
        config.relay_id = id;
    }
    config.validate()?;
    let ctx = PublisherContext {
        pool,
        schema,
        relay_id: config.relay_id.clone(),
    };
    let publisher = AnyPublisher::from_url(&args.publisher, &ctx).await?;
    let listen_config: tokio_postgres::Config = url.parse()?;
    let relay = Relay::new(store, publisher, config)?.with_listener(listen_config);
    if args.once {
        relay.reap().await?;
        println!("{}", relay.run_once().await?);
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));
    tracing::info!(relay_id = %relay.config().relay_id, "relay running");
    relay.run(shutdown).await?;
    Ok(())
}

/// Cancels `token` on SIGINT or SIGTERM.
async fn signal_shutdown(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("shutdown requested; finishing the batch in flight");
    token.cancel();
}
