//! `outbox bench`: every figure is measured against a reference in the same
//! run (the seed's algorithm, the naive UPDATE batch, the DELETE limit, a
//! hand-written INSERT, the first slice of a soak), so each is a ratio.

mod bar;
mod ordering;
mod produce;
mod soak;
mod throughput;
mod timing;

use bar::Bar;

/// `outbox bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    scenario: Scenario,
    /// Backlog size (drain, baseline: 40,000; ordering: 200,000; soak:
    /// 1,000,000), or transactions (produce: 20,000).
    #[arg(long, global = true)]
    messages: Option<u64>,
    /// Batch size of the relay and of the batch algorithms.
    #[arg(long, global = true, default_value_t = 500)]
    batch_size: usize,
    /// Runs per algorithm; the table shows medians.
    #[arg(long, global = true, default_value_t = 3)]
    runs: usize,
    /// Relay pipelines in parallel (drain, baseline, soak); the relay's
    /// default when not given.
    #[arg(long, global = true)]
    concurrency: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
enum Scenario {
    /// Preload a backlog, time the relay until all are sent.
    Drain,
    /// The seed's per-message algorithm, the naive UPDATE batch, the DELETE
    /// one-statement limit and the relay, on the same backlog.
    Baseline,
    /// Producers commit at a fixed rate while the relay runs: commit →
    /// publish percentiles.
    Latency {
        /// Messages per second committed by the producers.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// How long the producers run.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
        /// Poll only (as behind transaction-mode PgBouncer).
        #[arg(long)]
        no_notify: bool,
    },
    /// Per-aggregate ordering's cost: a backlog spread over many aggregates
    /// drained with ordering on and off, one aggregate's backlog with it
    /// on, and the `outbox relay` process with its default settings against
    /// the one-statement DELETE limit on the spread backlog.
    Ordering {
        /// Aggregates the backlog is dealt over, round-robin.
        #[arg(long, default_value_t = 10_000)]
        aggregates: u64,
        /// Messages of the one-aggregate case.
        #[arg(long, default_value_t = 40_000)]
        one_aggregate: u64,
    },
    /// An idle relay for a while: how many queries per second it issues.
    Idle {
        /// How long to watch.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
    },
    /// Enqueue transactions per second: the library against a hand-written
    /// INSERT, with and without the NOTIFY trigger.
    Produce {
        /// Producer connections committing in parallel.
        #[arg(long, default_value_t = 4)]
        producers: usize,
    },
    /// A large backlog through the relay, timed per slice, with the hot
    /// table's size and dead tuples; then again with a REPEATABLE READ
    /// transaction held open.
    Soak {
        /// Messages per measured slice.
        #[arg(long, default_value_t = 100_000)]
        slice: u64,
        /// How long the second soak holds its transaction open, in seconds
        /// (0 skips that soak).
        #[arg(long, default_value_t = 60)]
        hold_seconds: u64,
    },
}

pub async fn run(url: Option<String>, args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs > 0, "--runs must be positive");
    anyhow::ensure!(args.messages != Some(0), "--messages must be positive");
    anyhow::ensure!(args.batch_size > 0, "--batch-size must be positive");
    let concurrency = args
        .concurrency
        .unwrap_or(outbox_relay::RelayConfig::default().concurrency);
    anyhow::ensure!(
        (1..=64).contains(&concurrency),
        "--concurrency must be 1..=64"
    );
    // fsync stays on: a benchmark measures what production would see.
    let (url, _throwaway) = crate::db::url_or_throwaway(url, true)?;
    match args.scenario {
        Scenario::Latency {
            rate,
            seconds,
            no_notify,
        } => timing::latency(&url, rate, seconds, !no_notify, args.runs, args.json).await,
        Scenario::Idle { seconds } => timing::idle(&url, seconds, args.runs, args.json).await,
        Scenario::Produce { producers } => {
            produce::run(
                &url,
                args.messages.unwrap_or(20_000),
                producers,
                args.runs,
                args.json,
            )
            .await
        }
        Scenario::Soak {
            slice,
            hold_seconds,
        } => {
            let p = outbox_bench::SoakParams {
                messages: args.messages.unwrap_or(1_000_000),
                slice,
                batch_size: args.batch_size,
                concurrency,
                hold: None,
            };
            soak::run(&url, p, hold_seconds, args.runs, args.json).await
        }
        Scenario::Ordering {
            aggregates,
            one_aggregate,
        } => {
            anyhow::ensure!(
                aggregates > 0 && one_aggregate > 0,
                "--aggregates and --one-aggregate must be positive"
            );
            let p = ordering::Params {
                bench: outbox_bench::OrderingParams {
                    messages: args.messages.unwrap_or(200_000),
                    aggregates,
                    one_aggregate,
                    batch_size: args.batch_size,
                    concurrency,
                },
                runs: args.runs,
                json: args.json,
            };
            ordering::run(&url, p).await
        }
        Scenario::Drain | Scenario::Baseline => {
            let t = throughput::Params {
                baseline: matches!(args.scenario, Scenario::Baseline),
                messages: args.messages.unwrap_or(40_000),
                batch_size: args.batch_size,
                runs: args.runs,
                concurrency,
                json: args.json,
            };
            throughput::run(&url, t).await
        }
    }
}
