//! `bench ordering`: what per-aggregate ordering costs, as ratios measured
//! within one run, cases interleaved run by run:
//! * a backlog spread over many aggregates, ordering on over ordering off
//!   (in-process relay, same pipelines);
//! * one aggregate's backlog (the worst case: nothing in parallel), ordering
//!   on, over the spread case with ordering on;
//! * the `outbox relay` binary as an operator starts it (default settings,
//!   launch → last `sent_at`) over the one-statement DELETE limit, on the
//!   spread backlog.

use super::Bar;
use outbox_bench::{
    drain_process, drain_spec, hot_table_bytes_per_message, median, Algorithm, DrainResult,
    DrainSpec, Progress,
};
use outbox_relay::relay::Ordering;
use serde_json::json;
use std::collections::BTreeMap;

pub(super) struct Params {
    pub messages: u64,
    pub aggregates: u64,
    pub one_aggregate: u64,
    pub batch_size: usize,
    pub runs: usize,
    pub concurrency: usize,
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    SpreadOff,
    SpreadOn,
    OneOn,
    DeleteLimit,
    Process,
}

impl Case {
    const ALL: [Case; 5] = [
        Case::SpreadOff,
        Case::SpreadOn,
        Case::OneOn,
        Case::DeleteLimit,
        Case::Process,
    ];

    fn key(self) -> &'static str {
        match self {
            Case::SpreadOff => "spread_off",
            Case::SpreadOn => "spread_on",
            Case::OneOn => "one_aggregate_on",
            Case::DeleteLimit => "delete_limit",
            Case::Process => "relay_process",
        }
    }

    fn label(self, p: &Params) -> String {
        match self {
            Case::SpreadOff => format!("spread, ordering none ({} pipelines)", p.concurrency),
            Case::SpreadOn => format!("spread, ordering aggregate ({} pipelines)", p.concurrency),
            Case::OneOn => format!(
                "one aggregate, ordering aggregate ({} msgs)",
                p.one_aggregate
            ),
            Case::DeleteLimit => "DELETE one-statement limit".into(),
            Case::Process => "outbox relay process, defaults".into(),
        }
    }
}

/// A ratio of two cases, per run and as the median of the per-run ratios.
struct Ratio {
    key: &'static str,
    what: &'static str,
    over: (Case, Case),
    target: f64,
}

const RATIOS: [Ratio; 3] = [
    Ratio {
        key: "spread_on_over_off",
        what: "spread: ordering on / off",
        over: (Case::SpreadOn, Case::SpreadOff),
        target: 0.9,
    },
    Ratio {
        key: "one_aggregate_over_spread_on",
        what: "one aggregate / spread (on)",
        over: (Case::OneOn, Case::SpreadOn),
        target: 0.3,
    },
    Ratio {
        key: "process_over_delete_limit",
        what: "relay process / DELETE limit",
        over: (Case::Process, Case::DeleteLimit),
        target: 0.5,
    },
];

async fn measure(
    pool: &deadpool_postgres::Pool,
    url: &str,
    p: &Params,
    case: Case,
    progress: &Progress,
) -> anyhow::Result<DrainResult> {
    let spread = DrainSpec {
        concurrency: p.concurrency,
        messages: p.messages,
        aggregates: Some(p.aggregates),
        batch_size: p.batch_size,
        ordering: Ordering::Aggregate,
    };
    Ok(match case {
        Case::SpreadOff => {
            let spec = DrainSpec {
                ordering: Ordering::None,
                ..spread
            };
            drain_spec(pool, Algorithm::Relay, &spec, progress).await?
        }
        Case::SpreadOn => drain_spec(pool, Algorithm::Relay, &spread, progress).await?,
        Case::OneOn => {
            let spec = DrainSpec {
                messages: p.one_aggregate,
                aggregates: Some(1),
                ..spread
            };
            drain_spec(pool, Algorithm::Relay, &spec, progress).await?
        }
        Case::DeleteLimit => drain_spec(pool, Algorithm::DeleteLimit, &spread, progress).await?,
        Case::Process => {
            let exe = std::env::current_exe()?;
            // The relay exactly as an operator starts it: no flag but the
            // schema, no OUTBOX_* variable (nor a config file through
            // OUTBOX_CONFIG) from this environment, the default log level.
            let command = |schema: &outbox::Schema| {
                let mut cmd = std::process::Command::new(&exe);
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
            };
            drain_process(pool, &spread, command, progress).await?
        }
    })
}

pub(super) async fn run(url: &str, p: Params) -> anyhow::Result<()> {
    // The reference algorithm uses one connection; the in-process relay
    // takes what its pipelines need. The relay process has its own pool.
    let pool = crate::db::connect(url, 2 * p.concurrency + 2).await?;
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for run in 1..=p.runs {
        // Interleaved, and every other run in reverse, so drift on the
        // machine (and whatever the previous case left for vacuum and the
        // checkpointer) hits every case alike.
        let mut cases = Case::ALL.to_vec();
        if run % 2 == 0 {
            cases.reverse();
        }
        for case in cases {
            let progress = Progress::default();
            let bar = Bar::show(&progress, &format!("run {run}/{}", p.runs));
            let r = measure(&pool, url, &p, case, &progress).await?;
            drop(bar);
            eprintln!(
                "run {run}/{}: {:<44} {:>10.0} msg/s ({:.2} s)",
                p.runs,
                case.label(&p),
                r.rate(),
                r.elapsed.as_secs_f64()
            );
            rates.entry(case.key()).or_default().push(r.rate());
        }
        for ratio in &RATIOS {
            let (a, b) = (
                rates[ratio.over.0.key()][run - 1],
                rates[ratio.over.1.key()][run - 1],
            );
            eprintln!("run {run}/{}: {:<44} {:>10.2}", p.runs, ratio.what, a / b);
        }
    }
    let bytes = hot_table_bytes_per_message(
        &pool,
        &DrainSpec {
            concurrency: p.concurrency,
            messages: p.messages,
            aggregates: Some(p.aggregates),
            batch_size: p.batch_size,
            ordering: Ordering::Aggregate,
        },
    )
    .await?;
    let per_run = |r: &Ratio| -> Vec<f64> {
        let (a, b) = (&rates[r.over.0.key()], &rates[r.over.1.key()]);
        a.iter().zip(b).map(|(a, b)| a / b).collect()
    };
    let medians: BTreeMap<&str, f64> = Case::ALL
        .iter()
        .map(|c| (c.key(), median(&mut rates[c.key()].clone())))
        .collect();
    if p.json {
        let ratios: BTreeMap<&str, serde_json::Value> = RATIOS
            .iter()
            .map(|r| {
                let runs = per_run(r);
                let m = median(&mut runs.clone());
                (
                    r.key,
                    json!({"runs": runs, "median": m, "target": r.target, "met": m >= r.target}),
                )
            })
            .collect();
        let v = json!({
            "scenario": "ordering",
            "messages": p.messages,
            "aggregates": p.aggregates,
            "one_aggregate_messages": p.one_aggregate,
            "batch_size": p.batch_size,
            "runs": p.runs,
            "relay_pipelines": p.concurrency,
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
        p.messages, p.aggregates, p.one_aggregate, p.batch_size, p.concurrency, p.runs
    );
    println!("{:<44} {:>12}", "case", "msg/s");
    for case in Case::ALL {
        println!("{:<44} {:>12.0}", case.label(&p), medians[case.key()]);
    }
    println!(
        "{:<44} {:>12} {:>8} {:>6}",
        "ratio (median of the runs' ratios)", "per run", "median", "target"
    );
    for r in &RATIOS {
        let runs = per_run(r);
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
