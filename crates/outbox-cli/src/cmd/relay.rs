use crate::config::Settings;
use crate::http;
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_relay::{archive, backlog, Archiver, BacklogGauges, Relay, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `outbox relay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run one pass (claim, publish, settle) and print its counts.
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    pub flags: RelayFlags,
}

/// The relay's settings as flags. Each overrides the config file and its
/// `OUTBOX_*` variable; values are checked by the config loader, which
/// reports every bad one at once.
#[derive(Debug, Default, clap::Args)]
pub struct RelayFlags {
    /// Where to publish: `postgres` (the outbox database's published_events)
    /// or a URL: `postgres://…`, `amqp://…` (RabbitMQ), `mqtt://…`,
    /// `http(s)://…` (signed webhooks, options in OUTBOX_WEBHOOK_* variables),
    /// `redis://…` (Redis Streams), `asynq://…` (asynq tasks), `nats://…`
    /// (JetStream), `kafka://…`
    /// [env: OUTBOX_PUBLISHER] [default: postgres].
    #[arg(long)]
    publisher: Option<String>,
    /// Messages claimed per batch, 1..=10000 [env: OUTBOX_BATCH_SIZE] [default: 500].
    #[arg(long)]
    batch_size: Option<String>,
    /// A claim stops adding messages once their payloads pass this size
    /// (it always takes one), e.g. 16MiB [env: OUTBOX_MAX_BATCH_BYTES] [default: 16MiB].
    #[arg(long)]
    max_batch_bytes: Option<String>,
    /// A payload larger than this is never loaded: the message goes dead
    /// naming the limit [env: OUTBOX_MAX_MESSAGE_BYTES] [default: 2MiB].
    #[arg(long)]
    max_message_bytes: Option<String>,
    /// Attempts before a message goes dead [env: OUTBOX_MAX_ATTEMPTS] [default: 10].
    #[arg(long)]
    max_attempts: Option<String>,
    /// Retry delays, the last repeats [env: OUTBOX_BACKOFF] [default: 1s,5s,30s,2m,10m].
    #[arg(long)]
    backoff: Option<String>,
    /// Fraction of each retry delay randomised, [0, 1) [env: OUTBOX_JITTER] [default: 0.1].
    #[arg(long)]
    jitter: Option<String>,
    /// A claim older than this is presumed dead: its rows count a failed
    /// attempt and are retried after the backoff, or go dead at max
    /// attempts [env: OUTBOX_LEASE] [default: 5m].
    #[arg(long)]
    lease: Option<String>,
    /// How long one batch may take to publish before all of it fails
    /// retryably, spending an attempt [env: OUTBOX_PUBLISH_TIMEOUT] [default: 30s].
    #[arg(long)]
    publish_timeout: Option<String>,
    /// `aggregate`: messages of one aggregate (aggregate_type, aggregate_id)
    /// are published in id order, k+1 only after k is sent or dead, other
    /// aggregates in parallel; `none`: no order, for the last bit of
    /// throughput. Every relay of a schema must use the same
    /// [env: OUTBOX_ORDERING] [default: aggregate].
    #[arg(long)]
    ordering: Option<String>,
    /// With ordering on, how long a relay leases its share of the
    /// aggregates: a relay that dies hands them to the others after this
    /// long [env: OUTBOX_BUCKET_LEASE] [default: 30s].
    #[arg(long)]
    bucket_lease: Option<String>,
    /// Identifies this relay in `locked_by` [env: OUTBOX_RELAY_ID] [default: host-pid-random].
    #[arg(long)]
    relay_id: Option<String>,
    /// Wake up on the producers' NOTIFY: on|off (off for transaction-mode
    /// PgBouncer) [env: OUTBOX_NOTIFY] [default: on].
    #[arg(long)]
    notify: Option<String>,
    /// Sleep when there is nothing to do [env: OUTBOX_POLL_INTERVAL] [default: 1s].
    #[arg(long)]
    poll_interval: Option<String>,
    /// How often expired leases are looked for [env: OUTBOX_REAP_INTERVAL] [default: 30s].
    #[arg(long)]
    reap_interval: Option<String>,
    /// Claim/publish pipelines in parallel, 1..=64; with ordering on, each
    /// aggregate's messages still go out in order [env: OUTBOX_CONCURRENCY] [default: 4].
    #[arg(long)]
    concurrency: Option<String>,
    /// At most this many messages per second, or `off` [env: OUTBOX_RATE_LIMIT] [default: off].
    #[arg(long)]
    rate_limit: Option<String>,
    /// Archive sent rows older than this while running, or `off`
    /// [env: OUTBOX_ARCHIVE_AFTER] [default: off].
    #[arg(long)]
    archive_after: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g.
    /// 127.0.0.1:9090 (0.0.0.0:9090 to listen beyond this host)
    /// [env: OUTBOX_METRICS_ADDR] [default: off].
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Distinct topics that keep their own `topic` label on
    /// outbox_published_total (later ones count as `_other`), or `off` to
    /// drop the label [env: OUTBOX_METRICS_TOPICS] [default: 100].
    #[arg(long)]
    metrics_topics: Option<String>,
}

impl RelayFlags {
    /// The flags given, as `(config key, value)` pairs.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("publisher", &self.publisher),
            ("batch_size", &self.batch_size),
            ("max_batch_bytes", &self.max_batch_bytes),
            ("max_message_bytes", &self.max_message_bytes),
            ("max_attempts", &self.max_attempts),
            ("backoff", &self.backoff),
            ("jitter", &self.jitter),
            ("lease", &self.lease),
            ("publish_timeout", &self.publish_timeout),
            ("ordering", &self.ordering),
            ("bucket_lease", &self.bucket_lease),
            ("relay_id", &self.relay_id),
            ("notify", &self.notify),
            ("poll_interval", &self.poll_interval),
            ("reap_interval", &self.reap_interval),
            ("concurrency", &self.concurrency),
            ("rate_limit", &self.rate_limit),
            ("archive_after", &self.archive_after),
            ("metrics_addr", &self.metrics_addr),
            ("metrics_topics", &self.metrics_topics),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
    }
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let config = settings.relay_config();
    config.validate()?;
    // Installed before anything emits, so the first values are not lost.
    let metrics = match (settings.metrics_addr, args.once) {
        (Some(_), false) => {
            outbox_relay::metrics::set_topic_labels(settings.metrics_topics);
            Some(crate::http::install_recorder()?)
        }
        _ => None,
    };
    let url = crate::db::require_url(settings.database_url.clone())?;
    // Each pipeline holds at most two connections at once (the store's and,
    // for the postgres sink, the publisher's); the reaper and archiver one
    // each. With metrics on, the backlog count and the two readiness probes
    // get their own, so a busy relay does not turn unready waiting for one.
    let observers = if metrics.is_some() { 3 } else { 0 };
    let pool = crate::db::connect(&url, 2 * config.concurrency + 2 + observers).await?;
    let schema = settings.schema.clone();
    let store = Store::new(pool.clone(), schema.clone());
    store.check_migrated().await?;
    let ctx = PublisherContext {
        pool,
        schema,
        relay_id: config.relay_id.clone(),
    };
    // Shared with the readiness probe, which checks the same destination.
    let publisher = Arc::new(AnyPublisher::from_url(&settings.publisher, &ctx).await?);
    let listen_config: tokio_postgres::Config = url.parse()?;
    let relay = Relay::new(store, publisher.clone(), config)?.with_listener(listen_config);
    if args.once {
        relay.reap().await?;
        let pass = relay.run_once().await;
        // Frees this pass's buckets of aggregates for the next relay now,
        // not when their lease ends.
        relay.leave().await;
        println!("{}", pass?);
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    if let (Some(addr), Some(handle)) = (settings.metrics_addr, metrics) {
        let probes = http::Probes::new(relay.store().clone(), publisher);
        let server = http::bind(addr, handle, probes, shutdown.clone()).await?;
        tokio::spawn(server);
        let gauges = BacklogGauges::new(relay.store().clone(), backlog::Config::default())?;
        let stop = shutdown.clone();
        tokio::spawn(async move { gauges.run(stop).await });
    }
    tokio::spawn(signal_shutdown(shutdown.clone()));
    if let Some(after) = relay.config().archive_after {
        let archiver = Archiver::new(
            relay.store().clone(),
            archive::Config {
                older_than: after,
                ..archive::Config::default()
            },
        )?;
        // Checking a few times per retention period keeps the hot tables
        // near their steady size without churning on every pass.
        let every = (after / 4).clamp(Duration::from_secs(10), Duration::from_secs(3600));
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = archiver.run(stop, every).await {
                tracing::error!(error = %e, "archiver stopped");
            }
        });
    }
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
