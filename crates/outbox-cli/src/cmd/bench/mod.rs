//! `outbox bench`: throughput measured against the reference algorithms on
//! the same backlog, in the same run, so every figure is a ratio.

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
    /// Relay pipelines in parallel (drain and baseline).
    #[arg(long, global = true, default_value_t = 1)]
    concurrency: usize,
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
    /// An idle relay for a while: how many queries per second it issues.
    Idle {
        /// How long to watch.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
    },
}

pub async fn run(url: Option<String>, args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be positive");
    anyhow::ensure!(args.runs > 0, "--runs must be positive");
    // fsync stays on: a benchmark measures what production would see.
    let (url, _throwaway) = crate::db::url_or_throwaway(url, true)?;
    match args.scenario {
        Scenario::Latency {
            rate,
            seconds,
            no_notify,
        } => {
            return latency(&url, rate, seconds, !no_notify, args.runs, args.json).await;
        }
        Scenario::Idle { seconds } => return idle(&url, seconds, args.runs, args.json).await,
        Scenario::Drain | Scenario::Baseline => {}
    }
    // The reference algorithms use one connection, as their figures were
    // measured; the relay takes what its pipelines need.
    let pool = crate::db::connect(&url, 2 * args.concurrency + 1).await?;
    let algorithms: &[Algorithm] = match args.scenario {
        Scenario::Drain => &[Algorithm::Relay],
        _ => &[
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
            let r = drain(&pool, a, args.concurrency, args.messages, args.batch_size).await?;
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
            "scenario": if algorithms.len() == 1 { "drain" } else { "baseline" },
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

async fn latency(
    url: &str,
    rate: u32,
    seconds: u32,
    notify: bool,
    runs: usize,
    json: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        rate > 0 && seconds > 0,
        "--rate and --seconds must be positive"
    );
    let pool = crate::db::connect(url, 16).await?;
    let mut samples = Vec::new();
    for run in 1..=runs {
        let l = outbox_relay::bench::latency(&pool, url, rate, seconds, notify).await?;
        eprintln!(
            "run {run}/{runs}: {} messages at {rate}/s, notify {}: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            l.messages,
            if notify { "on" } else { "off" },
            ms(l.p50),
            ms(l.p95),
            ms(l.p99),
            ms(l.max)
        );
        samples.push(l);
    }
    let med = |f: fn(&outbox_relay::bench::Latency) -> std::time::Duration| {
        median(&mut samples.iter().map(|l| ms(f(l))).collect::<Vec<_>>())
    };
    let (p50, p95, p99, max) = (
        med(|l| l.p50),
        med(|l| l.p95),
        med(|l| l.p99),
        med(|l| l.max),
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"scenario": "latency", "rate": rate, "seconds": seconds, "notify": notify,
                "runs": runs, "median_ms": {"p50": p50, "p95": p95, "p99": p99, "max": max}})
        );
    } else {
        println!(
            "commit -> publish at {rate} msg/s for {seconds} s, notify {}, median of {runs} runs",
            if notify { "on" } else { "off" }
        );
        println!("p50 {p50:.1} ms  p95 {p95:.1} ms  p99 {p99:.1} ms  max {max:.1} ms");
    }
    Ok(())
}

async fn idle(url: &str, seconds: u32, runs: usize, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(seconds > 0, "--seconds must be positive");
    let pool = crate::db::connect(url, 2).await?;
    let mut qps = Vec::new();
    for run in 1..=runs {
        let q = outbox_relay::bench::idle_queries_per_second(&pool, url, seconds, true).await?;
        eprintln!("run {run}/{runs}: idle relay issued {q:.2} queries/s");
        qps.push(q);
    }
    let m = median(&mut qps);
    if json {
        println!(
            "{}",
            serde_json::json!({"scenario": "idle", "seconds": seconds, "runs": runs, "median_queries_per_sec": m})
        );
    } else {
        println!("idle relay: {m:.2} queries/s (median of {runs} runs of {seconds} s)");
    }
    Ok(())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
