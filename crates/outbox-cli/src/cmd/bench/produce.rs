//! `bench produce`: enqueue transactions per second, the library against a
//! hand-written INSERT, NOTIFY on and off, interleaved run by run.

use super::Bar;
use outbox_bench::{
    library_over_hand_insert, median, produce, produce_key as key, ProduceMode, ProduceParams,
    Progress, PRODUCE_CASES,
};
use std::collections::BTreeMap;

pub(super) async fn run(
    url: &str,
    transactions: u64,
    producers: usize,
    runs: usize,
    json: bool,
) -> anyhow::Result<()> {
    if !(1..=64).contains(&producers) {
        return outbox_cli::usage("--producers must be 1..=64");
    }
    let pool = super::connect(url, producers + 1).await?;
    let mut rates: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for run in 1..=runs {
        for (mode, notify) in PRODUCE_CASES {
            let progress = Progress::default();
            let bar = Bar::show(&progress, &format!("run {run}/{runs}"));
            let p = ProduceParams {
                transactions,
                producers,
                notify,
                mode,
            };
            let r = produce(&pool, p, &progress).await?;
            drop(bar);
            eprintln!(
                "run {run}/{runs}: {:<24} {:>8.0} transactions/s",
                key(mode, notify),
                r.rate()
            );
            rates.entry(key(mode, notify)).or_default().push(r.rate());
        }
    }
    let med: BTreeMap<String, f64> = rates
        .iter()
        .map(|(k, v)| (k.clone(), median(&mut v.clone())))
        .collect();
    let ratio = |notify| library_over_hand_insert(&med, notify);
    if json {
        let v = serde_json::json!({
            "scenario": "produce", "transactions": transactions, "producers": producers,
            "runs": runs, "median_tx_per_sec": med, "samples": rates,
            "library_over_hand_insert": {"notify": ratio(true), "no_notify": ratio(false)},
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{transactions} one-message transactions, {producers} producers, median of {runs} runs"
    );
    println!(
        "{:<8} {:>16} {:>16} {:>16}",
        "NOTIFY", "hand INSERT tx/s", "library tx/s", "library is ×"
    );
    for notify in [true, false] {
        println!(
            "{:<8} {:>16.0} {:>16.0} {:>16.2}",
            if notify { "on" } else { "off" },
            med[&key(ProduceMode::HandInsert, notify)],
            med[&key(ProduceMode::Library, notify)],
            ratio(notify)
        );
    }
    Ok(())
}
