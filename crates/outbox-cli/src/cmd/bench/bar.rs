//! The progress bar every scenario shows on a terminal: the phase, how far
//! it is and its rate, redrawn from the scenario's [`Progress`] a few times
//! a second. Off a terminal (CI logs, `--json` piped somewhere) nothing is
//! drawn.

use indicatif::{ProgressBar, ProgressStyle};
use outbox_bench::Progress;
use std::io::IsTerminal;
use std::time::Duration;

/// Draws until dropped, then clears itself so the run's result line
/// prints cleanly.
pub struct Bar {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Bar {
    /// Starts drawing `progress`.
    pub fn show(progress: &Progress, label: &str) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} {msg:>8} {bar:30} {pos}/{len}  {per_sec}  eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(label.to_owned());
            bar
        } else {
            ProgressBar::hidden()
        };
        let task = {
            let (bar, progress) = (bar.clone(), progress.clone());
            tokio::spawn(async move {
                let mut phase = String::new();
                loop {
                    let (now, total, done) = progress.snapshot();
                    if now != phase {
                        // A new phase restarts the rate and the estimate.
                        bar.reset();
                        bar.set_message(now.clone());
                        phase = now;
                    }
                    bar.set_length(total);
                    bar.set_position(done);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Self { bar, task }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}
