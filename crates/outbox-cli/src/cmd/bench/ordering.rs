//! `bench ordering`: what per-aggregate ordering costs, as ratios measured
//! within one run, cases interleaved run by run:
//! * a backlog spread over many aggregates, ordering on over ordering off
//!   (in-process relay, same pipelines);
//! * one aggregate's backlog (the worst case: nothing in parallel), ordering
//!   on, over the spread case with ordering on;
//! * the `outbox relay` binary as an operator starts it (default settings,
//!   launch → last `sent_at`) over the one-statement DELETE limit, on the
//!   spread backlog.
//!
//! The cases, the ratios and their targets are `outbox_bench`'s; here are
//! the relay command (this binary), the interleaved runs and the printing.

use super::Bar;
use outbox_bench::{
    hot_table_bytes_per_message, measure, median, Case, CaseSet, OrderingParams, Progress, RATIOS,
};
use serde_json::json;
use std::collections::BTreeMap;

pub(super) struct Params {
    pub bench: OrderingParams,
    pub runs: usize,
    pub json: bool,
    pub cases: CaseSet,
}

/// The relay exactly as an operator starts it: this binary with no flag but
/// the schema, no OUTBOX_* variable (nor a config file through
/// OUTBOX_CONFIG) from this environment, the default log level.
fn relay_command<'a>(
    exe: &'a std::path::Path,
    url: &'a str,
) -> impl FnOnce(&outbox::Schema) -> std::process::Command + 'a {
    move |schema| {
        let mut cmd = std::process::Command::new(exe);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("OUTBOX_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("DATABASE_URL", url).env_remove("RUST_LOG").args([
            "--schema",
            schema.name(),
            "relay",
        ]);
        cmd
    }
}

pub(super) async fn run(url: &str, p: Params) -> anyhow::Result<()> {
    // The reference algorithm uses one connection; the in-process relay
    // takes what its pipelines need. The relay process has its own pool.
    let (bench, runs) = (&p.bench, p.runs);
    let pool = super::connect(url, 2 * bench.concurrency + 2).await?;
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for run in 1..=runs {
        // Interleaved, and every other run in reverse, so drift on the
        // machine (and whatever the previous case left for vacuum and the
        // checkpointer) hits every case alike.
        let mut cases: Vec<Case> = Case::ALL
            .into_iter()
            .filter(|c| p.cases.contains(*c))
            .collect();
        if run % 2 == 0 {
            cases.reverse();
        }
        for case in cases {
            let progress = Progress::default();
            let bar = Bar::show(&progress, &format!("run {run}/{runs}"));
            // This binary is looked up for the relay process case only.
            let exe = match case {
                Case::Process => std::env::current_exe()?,
                _ => std::path::PathBuf::new(),
            };
            let r = measure(&pool, bench, case, relay_command(&exe, url), &progress).await?;
            drop(bar);
            eprintln!(
                "run {run}/{runs}: {:<44} {:>10.0} msg/s ({:.2} s)",
                case.label(bench),
                r.rate(),
                r.elapsed.as_secs_f64()
            );
            rates.entry(case.key()).or_default().push(r.rate());
        }
        for ratio in ratios(p.cases) {
            let (a, b) = (
                rates[ratio.over.0.key()][run - 1],
                rates[ratio.over.1.key()][run - 1],
            );
            eprintln!("run {run}/{runs}: {:<44} {:>10.2}", ratio.what, a / b);
        }
    }
    let bytes = hot_table_bytes_per_message(&pool, &bench.spread()).await?;
    let medians: BTreeMap<&str, f64> = rates
        .iter()
        .map(|(k, r)| (*k, median(&mut r.clone())))
        .collect();
    if p.json {
        let ratios: BTreeMap<&str, serde_json::Value> = ratios(p.cases)
            .map(|r| {
                let runs = r.per_run(&rates);
                let m = median(&mut runs.clone());
                (
                    r.key,
                    json!({"runs": runs, "median": m, "target": r.target, "met": m >= r.target}),
                )
            })
            .collect();
        let v = json!({
            "scenario": "ordering",
            "messages": bench.messages,
            "aggregates": bench.aggregates,
            "one_aggregate_messages": bench.one_aggregate,
            "batch_size": bench.batch_size,
            "runs": runs,
            "relay_pipelines": bench.concurrency,
            "median_msgs_per_sec": medians,
            "samples": rates,
            "ratios": ratios,
            "hot_table_bytes_per_pending_message": bytes,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{} messages over {} aggregates ({} for one aggregate), batch {}, in-process relay pipelines {}, median of {} runs",
        bench.messages, bench.aggregates, bench.one_aggregate, bench.batch_size, bench.concurrency, runs
    );
    println!("{:<44} {:>12}", "case", "msg/s");
    for case in Case::ALL.into_iter().filter(|c| p.cases.contains(*c)) {
        println!("{:<44} {:>12.0}", case.label(bench), medians[case.key()]);
    }
    println!(
        "{:<44} {:>12} {:>8} {:>6}",
        "ratio (median of the runs' ratios)", "per run", "median", "target"
    );
    for r in ratios(p.cases) {
        let runs = r.per_run(&rates);
        let shown: Vec<String> = runs.iter().map(|x| format!("{x:.2}")).collect();
        let m = median(&mut runs.clone());
        println!(
            "{:<44} {:>12} {:>8.2} {:>5}{}",
            r.what,
            shown.join("/"),
            m,
            format!("≥{}", r.target),
            if m >= r.target { "" } else { "  MISSED" }
        );
    }
    println!(
        "hot table (messages, with indexes) per pending message: {bytes:.0} B (ordering adds no column or index to it)"
    );
    Ok(())
}

/// The ratios whose two cases are both measured.
fn ratios(cases: CaseSet) -> impl Iterator<Item = &'static outbox_bench::Ratio> {
    RATIOS
        .iter()
        .filter(move |r| cases.contains(r.over.0) && cases.contains(r.over.1))
}
