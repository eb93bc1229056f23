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
use outbox_cli::usage;
use outbox_relay::connect::Cancels;

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
        /// Only these cases, by key, comma-separated (spread_off,
        /// spread_on, one_aggregate_on, delete_limit, relay_process,
        /// lanes); a ratio is shown when both its cases ran.
        #[arg(long, value_parser = outbox_bench::CaseSet::parse, default_value = "spread_off,spread_on,one_aggregate_on,delete_limit,relay_process,lanes")]
        cases: outbox_bench::CaseSet,
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

/// The cancel keys of every connection the bench opened: process-wide, as
/// the signal that needs them is.
static CANCELS: std::sync::LazyLock<Cancels> = std::sync::LazyLock::new(Cancels::default);

/// A pool whose connections an interrupt cancels ([`clean_up`]).
async fn connect(url: &str, max_size: usize) -> anyhow::Result<deadpool_postgres::Pool> {
    crate::db::connect_cancellable(url, max_size, &CANCELS).await
}

pub async fn run(url: Option<String>, args: Args) -> anyhow::Result<()> {
    let concurrency = args
        .concurrency
        .unwrap_or(outbox_relay::RelayConfig::default().concurrency);
    if args.runs == 0 {
        return usage("--runs must be positive");
    }
    if args.messages == Some(0) {
        return usage("--messages must be positive");
    }
    if args.batch_size == 0 {
        return usage("--batch-size must be positive");
    }
    if !(1..=64).contains(&concurrency) {
        return usage("--concurrency must be 1..=64");
    }
    if let Scenario::Ordering {
        aggregates,
        one_aggregate,
        ..
    } = args.scenario
    {
        if aggregates == 0 || one_aggregate == 0 {
            return usage("--aggregates and --one-aggregate must be positive");
        }
    }
    // fsync stays on: a benchmark measures what production would see.
    let (url, _throwaway) = crate::db::url_or_throwaway(url, true)?;
    match crate::until_signal(scenario(&url, args, concurrency)).await {
        Err(e) if e.is::<crate::Interrupted>() => Err(clean_up(&url).await.into()),
        done => done,
    }
}

/// After SIGINT or SIGTERM (the scenario already dropped): cancels on the
/// server what the bench's connections still run (a preload goes on to
/// its commit after the client is gone), then drops the schemas it made,
/// and says so.
async fn clean_up(url: &str) -> crate::Interrupted {
    let connections = CANCELS.cancel_all().await;
    let plural = if connections == 1 { "" } else { "s" };
    let cancelled =
        format!("cancelled its statements on the server ({connections} connection{plural})");
    let dropped = async {
        let pool = crate::db::connect(url, 1).await?;
        let client = pool.get().await?;
        anyhow::Ok(outbox_bench::drop_leftover_schemas(&client).await?)
    };
    let removed = match dropped.await {
        Ok(schemas) if schemas.is_empty() => format!("{cancelled}; it had no schema to drop"),
        Ok(schemas) => {
            let names: Vec<&str> = schemas.iter().map(|s| s.name()).collect();
            format!("{cancelled} and dropped schema {}", names.join(", "))
        }
        Err(e) => format!(
            "{cancelled}, but could not drop its schemas: {}",
            outbox_relay::error_chain(e.as_ref())
        ),
    };
    crate::Interrupted {
        removed: Some(removed),
    }
}

async fn scenario(url: &str, args: Args, concurrency: usize) -> anyhow::Result<()> {
    let url = url.to_owned();
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
            cases,
        } => {
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
                cases,
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
