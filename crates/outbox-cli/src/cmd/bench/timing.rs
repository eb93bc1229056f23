//! `bench latency` and `bench idle`: percentiles of commit → publish at a
//! steady rate, and the statements an idle relay costs the database.

use outbox_bench::median;

pub(super) async fn latency(
    url: &str,
    rate: u32,
    seconds: u32,
    notify: bool,
    runs: usize,
    json: bool,
) -> anyhow::Result<()> {
    if rate == 0 || seconds == 0 {
        return outbox_cli::usage("--rate and --seconds must be positive");
    }
    let pool = super::connect(url, 16).await?;
    let mut samples = Vec::new();
    for run in 1..=runs {
        let l = outbox_bench::latency(&pool, url, rate, seconds, notify).await?;
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
    let med = |f: fn(&outbox_bench::Latency) -> std::time::Duration| {
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

pub(super) async fn idle(url: &str, seconds: u32, runs: usize, json: bool) -> anyhow::Result<()> {
    if seconds == 0 {
        return outbox_cli::usage("--seconds must be positive");
    }
    let pool = super::connect(url, 2).await?;
    let mut qps = Vec::new();
    for run in 1..=runs {
        let q = outbox_bench::idle_queries_per_second(&pool, url, seconds, true).await?;
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

pub(super) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
