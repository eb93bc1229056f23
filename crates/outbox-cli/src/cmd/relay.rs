use crate::config::{keys, Key, Settings};
use crate::http;
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_relay::{Admin, Relay, Store};
use std::sync::Arc;
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

/// The relay's settings as flags, one per non-global key of the config
/// table (`config/keys/table.rs`), with its `--help` from there. Each overrides
/// the config file and its `OUTBOX_*` variable; values are checked by the
/// config loader, which reports every bad one at once. No clap `env =` or
/// default: the loader reads those itself so it can tell where each value
/// came from.
#[derive(Debug, Default, Clone)]
pub struct RelayFlags(Vec<(&'static str, String)>);

fn relay_keys() -> impl Iterator<Item = &'static Key> {
    keys().iter().filter(|k| !k.global && k.flag.is_some())
}

impl clap::FromArgMatches for RelayFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self(
            relay_keys()
                .filter_map(|k| m.get_one::<String>(k.name).map(|v| (k.name, v.clone())))
                .collect(),
        ))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for RelayFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // The keys without a flag (secrets), listed after the flags.
        let secrets: Vec<String> = keys()
            .iter()
            .filter(|k| k.flag.is_none())
            .map(|k| format!("  {}: {}", k.name, k.help_line()))
            .collect();
        let cmd = cmd.after_help(format!(
            "Secrets, from the environment or the config file only (command lines show in `ps`):\n{}",
            secrets.join("\n")
        ));
        relay_keys().fold(cmd, |cmd, k| {
            cmd.arg(
                clap::Arg::new(k.name)
                    .long(k.flag.unwrap_or_default().trim_start_matches("--"))
                    .value_name(k.env.trim_start_matches("OUTBOX_"))
                    .help(k.help_line()),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl RelayFlags {
    /// The flags given, as `(config key, value)` pairs.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        self.0.clone()
    }
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let config = settings.relay_config();
    if let Err(e) = config.validate() {
        return outbox_cli::usage(e);
    }
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
    // The fourth is spare: the operator page at `/` has its own pool (`http::page_store`).
    let observers = if metrics.is_some() { 4 } else { 0 };
    let pool = crate::db::connect_as(
        &url,
        2 * config.concurrency + 2 + observers,
        &config.relay_id,
    )
    .await?;
    let schema = settings.schema.clone();
    let store = Store::new(pool.clone(), schema.clone());
    Admin::new(store.clone()).check_migrated().await?;
    let ctx = PublisherContext {
        pool,
        schema,
        relay_id: config.relay_id.clone(),
        settings: settings.publisher_settings.clone(),
    };
    // Shared with the readiness probe, which checks the same destination.
    let publisher = Arc::new(AnyPublisher::from_url(&settings.publisher, &ctx).await?);
    let target = outbox_relay::connect::target(&url)?.named(&config.relay_id);
    let listen_config = target.config.clone();
    let tls = target.mode;
    let relay = Relay::new(store, publisher.clone(), config)?.with_listener(target);
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
        let page = http::PageSetup {
            token: settings.ui_token.as_ref().map(|t| t.expose().to_owned()),
            database_url: url.clone(),
            allowed_hosts: settings.ui_allowed_hosts.clone(),
            breaker: relay.breaker_view(),
        };
        let server = http::bind(addr, handle, probes, page, shutdown.clone()).await?;
        tokio::spawn(server);
    }
    tokio::spawn(super::cancel_on_signal(
        shutdown.clone(),
        "shutdown requested; finishing the batch in flight",
    ));
    let c = relay.config();
    let hosts: Vec<String> = listen_config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let database = format!(
        "{}/{}",
        hosts.join(","),
        listen_config.get_dbname().unwrap_or("(default)")
    );
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        relay_id = %c.relay_id,
        database,
        tls = ?tls,
        schema = %settings.schema,
        publisher = %outbox_relay::redact::redact(&settings.publisher),
        pipelines = c.concurrency,
        ordering = c.ordering.as_str(),
        "relay running"
    );
    relay.run(shutdown).await?;
    Ok(())
}
