use crate::config::Settings;
use anyhow::Context;
use outbox_cli::usage;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `outbox ui`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to serve the page on. Beyond loopback it needs
    /// OUTBOX_UI_TOKEN, or --read-only.
    #[arg(long, default_value = "127.0.0.1:9091", value_name = "HOST:PORT")]
    addr: SocketAddr,
    /// Serve the page without actions, even with OUTBOX_UI_TOKEN set.
    #[arg(long)]
    read_only: bool,
    /// Count at most once per this, for every viewer together, e.g. 2s.
    #[arg(long, value_parser = super::parse_duration, default_value = "2s", value_name = "DURATION")]
    interval: Duration,
    /// Host names the page answers besides IP addresses and localhost,
    /// comma-separated (any other `Host` is refused: DNS rebinding).
    #[arg(long, env = "OUTBOX_UI_ALLOWED_HOSTS", value_name = "NAMES")]
    ui_allowed_hosts: Option<String>,
}

/// `outbox ui`, with the configuration's `ui_token` (`OUTBOX_UI_TOKEN`, or
/// the config file: never a flag, as flags show in `ps`), checked with
/// every other key before this runs.
pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let url = settings.database_url.clone();
    let schema = settings.schema.clone();
    let token = settings.ui_token.as_ref().map(|t| t.expose().to_owned());
    if args.interval < Duration::from_millis(500) {
        return usage(format!(
            "--interval must be at least 500ms, got {:?}",
            args.interval
        ));
    }
    // Checked before connecting, so a wrong start costs nothing.
    if !args.addr.ip().is_loopback() && token.is_none() && !args.read_only {
        return usage(format!(
            "refusing to serve the operator page on {} (beyond this host) without \
             OUTBOX_UI_TOKEN: set it (actions then need it), or pass --read-only",
            args.addr
        ));
    }
    let allowed_hosts = match &args.ui_allowed_hosts {
        Some(names) => crate::config::parse::host_names(names)
            .or_else(|e| usage(format!("--ui-allowed-hosts: {e}")))?,
        None => settings.ui_allowed_hosts.clone(),
    };
    let token = if args.read_only { None } else { token };
    // Beyond loopback the page shows producers' payloads and errors to
    // whoever reaches it: with a token, reading needs it too.
    let private = !args.addr.ip().is_loopback() && token.is_some();
    let url = crate::db::require_url(url)?;
    // Proves the URL now (one clear line if it is wrong), then serves from
    // the page's own small pool with a statement timeout.
    drop(crate::db::connect(&url, 1).await?);
    let store = crate::http::page_store(&url, schema)?;
    outbox_relay::Admin::new(store.clone())
        .check_migrated()
        .await?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot serve the operator page on {}", args.addr))?;
    let bound = listener.local_addr().unwrap_or(args.addr);
    let shutdown = CancellationToken::new();
    let actions = token.is_some();
    let (app, snapshots) = crate::ui::router(
        store.clone(),
        crate::ui::Options {
            token,
            private,
            interval: args.interval,
            breaker: None,
            allowed_hosts,
        },
        shutdown.clone(),
    );
    tokio::spawn(super::cancel_on_signal(
        shutdown.clone(),
        "shutdown requested",
    ));
    tracing::info!(
        addr = %bound,
        schema = %store.schema(),
        actions = if actions { "on (OUTBOX_UI_TOKEN)" } else { "off (read-only)" },
        reading = if private { "needs the token" } else { "open" },
        "operator page on http://{bound}/"
    );
    if !actions {
        tracing::info!(
            "read-only: set OUTBOX_UI_TOKEN (16+ characters) to replay and purge from the page"
        );
    }
    tokio::join!(crate::http::serve(listener, app, shutdown), snapshots);
    Ok(())
}
