//! A smoke run of every `outbox bench` scenario, tiny, so the harness keeps
//! working. Benchmarks are not tests: nothing here checks a speed, only
//! that each scenario runs to its own end-of-run check (every message
//! published, every transaction a row) and reports its figures.

use crate::common;

use common::{bare, run};
use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--runs", "1", "--json"]);
    let (ok, out, err) = run(&mut bare(&all));
    assert!(ok, "outbox {all:?} failed:\n{err}\n{out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn positive(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x > 0.0)
}

#[test]
fn baseline_measures_every_algorithm_and_the_relay() {
    let v = bench(&["baseline", "--messages", "300", "--batch-size", "50"]);
    let m = &v["median_msgs_per_sec"];
    for key in ["seed", "naive_update", "delete_limit", "relay"] {
        assert!(positive(&m[key]), "{key} missing in {v}");
    }
    assert!(positive(&v["peak_rss_bytes"]), "{v}");
}

#[test]
fn ordering_compares_on_off_one_aggregate_and_the_relay_process() {
    let v = bench(&[
        "ordering",
        "--messages",
        "2000",
        "--aggregates",
        "100",
        "--one-aggregate",
        "500",
        "--batch-size",
        "100",
    ]);
    let m = &v["median_msgs_per_sec"];
    for key in [
        "spread_off",
        "spread_on",
        "one_aggregate_on",
        "delete_limit",
        "relay_process",
        "lanes",
    ] {
        assert!(positive(&m[key]), "{key} missing in {v}");
        assert_eq!(v["samples"][key].as_array().map(Vec::len), Some(1), "{v}");
    }
    for key in [
        "spread_on_over_off",
        "one_aggregate_over_spread_on",
        "process_over_delete_limit",
        "lanes_over_delete_limit",
    ] {
        let r = &v["ratios"][key];
        assert!(positive(&r["median"]), "{key} missing in {v}");
        assert!(positive(&r["target"]) && r["met"].is_boolean(), "{v}");
    }
    assert!(positive(&v["hot_table_bytes_per_pending_message"]), "{v}");
}

#[test]
fn ordering_measures_only_the_cases_asked_and_the_ratios_between_them() {
    let v = bench(&[
        "ordering",
        "--messages",
        "2000",
        "--aggregates",
        "100",
        "--batch-size",
        "100",
        "--cases",
        "lanes,delete_limit",
    ]);
    let measured: Vec<&String> = v["median_msgs_per_sec"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(measured, ["delete_limit", "lanes"], "{v}");
    let ratios: Vec<&String> = v["ratios"].as_object().unwrap().keys().collect();
    assert_eq!(ratios, ["lanes_over_delete_limit"], "{v}");
    let (ok, _, err) = run(&mut bare(&["bench", "ordering", "--cases", "lanes,fast"]));
    assert!(!ok);
    assert!(
        err.contains("unknown case \"fast\"") && err.contains("delete_limit"),
        "{err}"
    );
}

#[test]
fn produce_compares_the_library_with_a_hand_written_insert() {
    let v = bench(&["produce", "--messages", "200", "--producers", "2"]);
    for key in ["notify", "no_notify"] {
        assert!(positive(&v["library_over_hand_insert"][key]), "{v}");
    }
}

#[test]
fn soak_reports_each_slice_with_and_without_a_held_transaction() {
    let v = bench(&[
        "soak",
        "--messages",
        "3000",
        "--slice",
        "1000",
        "--hold-seconds",
        "1",
        "--batch-size",
        "100",
    ]);
    let cases = v["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 2, "{v}");
    for case in cases {
        let slices = case["median_run"]["slices"].as_array().expect("slices");
        assert_eq!(slices.len(), 3, "{case}");
        assert!(slices.iter().all(|s| positive(&s["hot_table_bytes"])));
    }
    assert!(cases[1]["median_run"]["held_seconds"].is_number(), "{v}");
}

#[test]
fn latency_and_idle_report_their_figures() {
    let v = bench(&["latency", "--rate", "50", "--seconds", "1"]);
    assert!(positive(&v["median_ms"]["p99"]), "{v}");
    let v = bench(&["idle", "--seconds", "1"]);
    assert!(v["median_queries_per_sec"].is_number(), "{v}");
}

#[test]
fn bad_numbers_are_refused_before_anything_runs() {
    for args in [
        &["bench", "drain", "--runs", "0"][..],
        &["bench", "drain", "--concurrency", "0"],
        &["bench", "soak", "--messages", "10", "--slice", "100"],
        &["bench", "produce", "--producers", "0"],
        &["bench", "ordering", "--aggregates", "0"],
    ] {
        let (ok, _, err) = run(&mut bare(args));
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// The README's publisher figures come from scripts/bench-publishers.sh:
/// run it small, on the postgres publisher (PostgreSQL alone), with this
/// build's binary; it prints one median line per publisher, and refuses a
/// publisher it does not know before running anything.
#[test]
fn the_publishers_benchmark_script_runs_and_refuses_an_unknown_publisher() {
    let stdout = common::bench_publishers("postgres", 200);
    let rate = common::bench_rate(&stdout, "postgres");
    assert!(rate > 0.0, "{stdout}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("scripts/bench-publishers.sh");
    let bad = std::process::Command::new(&script)
        .arg("kafkaa")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown publisher kafkaa"));
}

/// The README's peak-RSS figure comes from `/usr/bin/time -v outbox relay
/// --batch-size 1000`: run as written (small, on the default publisher) until
/// the backlog is sent, stopped with SIGINT, and GNU time reports the peak.
#[tokio::test]
async fn the_peak_rss_command_runs_as_written() {
    let t = outbox_testkit::TestSchema::new("bench_rss").await;
    common::ok(&t, &["migrate"]);
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
           SELECT 'order.created', 'order', g::text, 'orders', jsonb_build_object('n', g) \
           FROM generate_series(1, 3000) g",
    )
    .await;
    let mut time = std::process::Command::new("/usr/bin/time");
    time.arg("-v")
        .arg(common::binary())
        .args(["--schema", t.name(), "relay", "--batch-size", "1000"])
        .env("DATABASE_URL", outbox_testkit::database_url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let time = time.spawn().expect("/usr/bin/time (Debian package time)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sent = "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'";
    while t.count(sent).await < 3000 {
        assert!(std::time::Instant::now() < deadline, "not sent within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // GNU time ignores SIGINT while it waits: the relay, its child, gets it.
    let relay = std::process::Command::new("pgrep")
        .args(["-P", &time.id().to_string()])
        .output()
        .unwrap();
    let relay = String::from_utf8_lossy(&relay.stdout).trim().to_owned();
    assert!(!relay.is_empty(), "no relay under /usr/bin/time");
    std::process::Command::new("kill")
        .args(["-INT", &relay])
        .status()
        .unwrap();
    let out = time.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kb: u64 = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS line:\n{err}"));
    assert!(kb > 0);
}

/// SIGINT while `bench drain` preloads its backlog: the preload is
/// cancelled on the server (it used to run on and commit after the
/// process was gone), the `outbox_bench_*` schema is dropped, and the
/// message names it. In a database of its own, so nothing else's
/// sessions or schemas are counted.
#[tokio::test]
async fn an_interrupted_bench_cancels_its_statements_and_drops_its_schema() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let db = outbox_testkit::TestDatabase::new("bench_sigint").await;
    let (client, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // Others than this test's own connection, running a statement.
    let busy = "SELECT count(*) FROM pg_stat_activity \
                WHERE datname = current_database() AND pid <> pg_backend_pid() \
                  AND state = 'active'";
    let schemas = "SELECT coalesce(string_agg(nspname, ','), '') FROM pg_namespace \
                   WHERE nspname LIKE 'outbox\\_bench\\_%'";
    let child = bare(&["bench", "drain", "--messages", "20000000", "--runs", "1"])
        .env("DATABASE_URL", db.url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed if the test fails before the bench exits.
    let mut bench = common::net::Running(child);
    // The preload INSERT is running once its schema exists and a session
    // of the bench is active in the database.
    let deadline = Instant::now() + Duration::from_secs(60);
    let schema = loop {
        let s: String = client.query_one(schemas, &[]).await.unwrap().get(0);
        let n: i64 = client.query_one(busy, &[]).await.unwrap().get(0);
        if !s.is_empty() && n > 0 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for the bench's preload to run (schemas {s:?}, {n} active sessions)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let interrupted = Instant::now();
    std::process::Command::new("kill")
        .args(["-INT", &bench.0.id().to_string()])
        .status()
        .unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut bench.0.stderr.take().unwrap(), &mut err).unwrap();
    let status = bench.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    // A 20-million-row preload takes minutes: an exit this soon, with the
    // schema gone, means it was cancelled rather than waited for.
    assert!(
        interrupted.elapsed() < Duration::from_secs(20),
        "took {:?} to stop:\n{err}",
        interrupted.elapsed()
    );
    assert!(
        err.contains(&format!("dropped schema {schema}")),
        "the message names what was removed:\n{err}"
    );
    let left: String = client.query_one(schemas, &[]).await.unwrap().get(0);
    assert_eq!(left, "", "schemas left behind");
    let n: i64 = client.query_one(busy, &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "a statement of the bench still runs on the server");
}
