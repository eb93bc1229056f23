//! `outbox bench`: throughput measured against the reference algorithms on
//! the same backlog, in the same run, so every figure is a ratio.

use crate::embedded::EmbeddedPostgres;
use outbox_relay::bench::{drain, median, Algorithm};
use std::collections::BTreeMap;

/// `outbox bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    scenario: Scenario,
    /// Backlog size.
    #[arg(long, global = true, default_value_t = 40_000)]
    messages: u64,
    /// Batch size of the relay and of the batch algorithms.
    #[arg(long, global = true, default_value_t = 500)]
    batch_size: usize,
    /// Runs per algorithm; the table shows medians.
    #[arg(long, global = true, default_value_t = 3)]
    runs: usize,
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
}

pub async fn run(url: Option<String>, args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be positive");
    anyhow::ensure!(args.runs > 0, "--runs must be positive");
    let mut _embedded = None;
    let url = match url.filter(|u| !u.trim().is_empty()) {
        Some(u) => u,
        None => {
            let pg = EmbeddedPostgres::start(true)?;
            eprintln!(
                "no DATABASE_URL: benchmarking a throwaway PostgreSQL at {} (fsync on, data in {}); it is removed on exit",
                pg.url(),
                pg.path().display()
            );
            _embedded.insert(pg).url()
        }
    };
    // One connection, as the reference figures were measured.
    let pool = crate::db::connect(&url, 1).await?;
    let algorithms: &[Algorithm] = match args.scenario {
        Scenario::Drain => &[Algorithm::Relay],
        Scenario::Baseline => &[
            Algorithm::Seed,
            Algorithm::NaiveUpdate,
            Algorithm::DeleteLimit,
            Algorithm::Relay,
        ],
    };
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    // Interleave the algorithms run by run, so drift on the machine hits all alike.
    for run in 1..=args.runs {
        for &a in algorithms {
            let r = drain(&pool, a, args.messages, args.batch_size).await?;
            eprintln!(
                "run {run}/{}: {:<28} {:>10.0} msg/s ({:.2} s)",
                args.runs,
                a.label(),
                r.rate(),
                r.elapsed.as_secs_f64()
            );
            rates.entry(a.key()).or_default().push(r.rate());
        }
    }
    let medians: Vec<(Algorithm, f64)> = algorithms
        .iter()
        .map(|a| (*a, median(rates.get_mut(a.key()).expect("measured"))))
        .collect();
    let relay = medians
        .iter()
        .find(|(a, _)| *a == Algorithm::Relay)
        .map(|m| m.1);
    if args.json {
        let v = serde_json::json!({
            "scenario": format!("{:?}", args.scenario).to_lowercase(),
            "messages": args.messages,
            "batch_size": args.batch_size,
            "runs": args.runs,
            "median_msgs_per_sec": medians.iter().map(|(a, r)| (a.key(), *r)).collect::<BTreeMap<_, _>>(),
            "samples": rates,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{} messages, batch {}, median of {} runs",
        args.messages, args.batch_size, args.runs
    );
    println!("{:<28} {:>12} {:>14}", "algorithm", "msg/s", "relay is ×");
    for (a, rate) in &medians {
        let ratio = relay.map_or(String::new(), |r| format!("{:.2}", r / rate));
        println!("{:<28} {:>12.0} {:>14}", a.label(), rate, ratio);
    }
    Ok(())
}
