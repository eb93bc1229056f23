//! `bench soak`: a large backlog through the relay, slice by slice, then
//! the same with a REPEATABLE READ transaction held open.

use super::Bar;
use outbox_bench::{median_run, soak, Progress, Soak, SoakParams};
use std::time::Duration;

pub(super) async fn run(
    url: &str,
    params: SoakParams,
    hold_seconds: u64,
    runs: usize,
    json: bool,
) -> anyhow::Result<()> {
    let pool = super::connect(url, 2 * params.concurrency + 3).await?;
    let mut cases = vec![("plain", None)];
    if hold_seconds > 0 {
        cases.push(("held", Some(Duration::from_secs(hold_seconds))));
    }
    let mut results: Vec<(&str, Vec<Soak>)> = cases.iter().map(|(k, _)| (*k, Vec::new())).collect();
    for run in 1..=runs {
        for (i, (label, hold)) in cases.iter().enumerate() {
            let progress = Progress::default();
            let bar = Bar::show(&progress, &format!("run {run}/{runs} {label}"));
            let s = soak(
                &pool,
                SoakParams {
                    hold: *hold,
                    ..params
                },
                &progress,
            )
            .await?;
            drop(bar);
            eprintln!(
                "run {run}/{runs}: {label:<6} {:>8.0} msg/s overall, last slice / first {:.2}",
                s.msgs_per_sec,
                s.last_over_first()
            );
            results[i].1.push(s);
        }
    }
    // Per case: the median run by last/first, shown slice by slice.
    let picked: Vec<(&str, Soak, f64)> = results
        .into_iter()
        .map(|(label, soaks)| {
            let (mid, ratio) = median_run(soaks);
            (label, mid, ratio)
        })
        .collect();
    if json {
        let v = serde_json::json!({
            "scenario": "soak", "messages": params.messages, "slice": params.slice,
            "batch_size": params.batch_size, "relay_pipelines": params.concurrency,
            "hold_seconds": hold_seconds, "runs": runs,
            "cases": picked.iter().map(|(label, s, ratio)| serde_json::json!({
                "case": label, "median_last_over_first": ratio, "median_run": s,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{} messages in slices of {}, batch {}, relay pipelines {}, median of {runs} runs",
        params.messages, params.slice, params.batch_size, params.concurrency
    );
    for (label, s, ratio) in &picked {
        match s.held_seconds {
            Some(h) => println!("{label}: a REPEATABLE READ transaction held open {h:.0} s"),
            None => println!("{label}: nothing held open"),
        }
        println!(
            "{:>10} {:>10} {:>14} {:>14} {:>12}",
            "published", "msg/s", "hot table MB", "indexes MB", "dead tuples"
        );
        for sl in &s.slices {
            println!(
                "{:>10} {:>10.0} {:>14.1} {:>14.1} {:>12}",
                sl.published,
                sl.msgs_per_sec,
                sl.hot_table_bytes as f64 / 1e6,
                sl.hot_index_bytes as f64 / 1e6,
                sl.dead_tuples
            );
        }
        println!("{label}: last slice / first slice, median of {runs} runs: {ratio:.2}");
    }
    Ok(())
}
