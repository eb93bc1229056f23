//! Any text as the TOML config file (`--config`): loading never panics; a
//! configuration it accepts is one the relay accepts and can run with (its
//! retry schedule computes a next attempt); and `outbox config`'s rendering
//! of it, saved as a file, loads back to the same settings.
#![no_main]
use libfuzzer_sys::fuzz_target;
use outbox_cli::config::{load_str, Settings};
use std::path::Path;

fuzz_target!(|text: &str| {
    let path = Path::new("fuzz.toml");
    let Ok(settings) = load_str(path, text, &[], |_| None) else {
        return;
    };
    let config = settings.relay_config();
    if let Err(e) = config.validate() {
        panic!("loaded, but the relay refuses it: {e}");
    }
    let now = chrono::Utc::now();
    for attempt in 1..=config.retry.schedule.len() as i32 + 1 {
        config.retry.next_run_at(attempt, now);
    }
    let rendered = settings.render();
    let again = load_str(path, &rendered, &[], |_| None)
        .unwrap_or_else(|e| panic!("the rendering does not load: {e}\n{rendered}"));
    assert_eq!(same(&again), same(&settings), "{rendered}");
});

/// What a rendering must keep (secret values are shown as `***`).
fn same(s: &Settings) -> String {
    format!(
        "{} {} {} {:?} {} {:?} {:?} {} {:?} {:?} {} {:?} {:?} {:?} {:?} {:?}",
        s.schema,
        s.batch_size,
        s.max_attempts,
        s.backoff,
        s.jitter,
        s.lease,
        s.relay_id,
        s.notify,
        s.poll_interval,
        s.reap_interval,
        s.concurrency,
        s.rate_limit,
        s.archive_after,
        s.metrics_addr,
        s.metrics_topics,
        s.log_format,
    )
}
