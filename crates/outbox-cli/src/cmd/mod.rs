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

use tokio_util::sync::CancellationToken;

/// Cancels `token` on SIGINT or SIGTERM, logging `what` (what stopping
/// means for the command). The handlers are installed when this is called,
/// before the command's startup line, so a signal sent as soon as it says
/// it runs already ends it cleanly.
pub(crate) fn cancel_on_signal(
    token: CancellationToken,
    what: &'static str,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("{what}");
        token.cancel();
    }
}
