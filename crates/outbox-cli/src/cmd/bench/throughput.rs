//! `bench drain` and `bench baseline`: messages per second draining one
//! backlog, the relay against the reference algorithms, interleaved run by
//! run so drift on the machine hits all alike.

use super::Bar;
use outbox_bench::{drain, median, peak_rss_bytes, Algorithm, Progress};
use std::collections::BTreeMap;

pub(super) struct Params {
    pub baseline: bool,
    pub messages: u64,
    pub batch_size: usize,
    pub runs: usize,
    pub concurrency: usize,
    pub json: bool,
}

pub(super) async fn run(url: &str, args: Params) -> anyhow::Result<()> {
    // The reference algorithms use one connection, as their figures were
    // measured; the relay takes what its pipelines need.
    let pool = super::connect(url, 2 * args.concurrency + 1).await?;
    let algorithms: &[Algorithm] = if !args.baseline {
        &[Algorithm::Relay]
    } else {
        &[
            Algorithm::Seed,
            Algorithm::NaiveUpdate,
            Algorithm::DeleteLimit,
            Algorithm::Relay,
        ]
    };
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    // Interleave the algorithms run by run, so drift on the machine hits all alike.
    for run in 1..=args.runs {
        for &a in algorithms {
            let progress = Progress::default();
            let bar = Bar::show(&progress, &format!("run {run}/{}", args.runs));
            let r = drain(
                &pool,
                a,
                args.concurrency,
                args.messages,
                args.batch_size,
                &progress,
            )
            .await?;
            drop(bar);
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
            "relay_pipelines": args.concurrency,
            "peak_rss_bytes": peak_rss_bytes(),
            "median_msgs_per_sec": medians.iter().map(|(a, r)| (a.key(), *r)).collect::<BTreeMap<_, _>>(),
            "samples": rates,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{} messages, batch {}, relay pipelines {}, median of {} runs",
        args.messages, args.batch_size, args.concurrency, args.runs
    );
    println!("{:<28} {:>12} {:>14}", "algorithm", "msg/s", "relay is ×");
    for (a, rate) in &medians {
        let ratio = relay.map_or(String::new(), |r| format!("{:.2}", r / rate));
        println!("{:<28} {:>12.0} {:>14}", a.label(), rate, ratio);
    }
    if let Some(rss) = peak_rss_bytes() {
        println!(
            "peak RSS of this process (relay and harness): {:.1} MB",
            rss as f64 / 1e6
        );
    }
    Ok(())
}
