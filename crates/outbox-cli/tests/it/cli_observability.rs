//! Observability on the real binary: `/metrics`, `/healthz` and `/readyz`
//! of a running relay, and logs that never carry passwords.

use crate::common;

use common::net::{
    free_port, get, sum, upstream, wait_for, wait_for_showing, Proxy, Running, Stderr,
};
use common::{bare, fails, outbox, run};
use outbox_testkit::TestSchema;
use std::net::TcpListener;
use std::process::Stdio;

#[tokio::test]
async fn relay_serves_metrics_and_readiness_until_the_database_goes() {
    const N: i64 = 37;
    let t = TestSchema::new("cli_metrics").await;
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', i::text, CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'refunds' END, '{{}}' \
           FROM generate_series(2, {N}) AS i; \
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, locked_by, locked_at) \
         VALUES ('e', 'a', '1', 'refunds', '{{}}', 'processing', 1, 'a-dead-relay', \
                 now() - interval '1 hour')"
    ))
    .await;
    let proxy = Proxy::start(upstream());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let stderr = Stderr::new();
    let child = outbox(
        t.name(),
        &[
            "relay",
            "--metrics-addr",
            &addr,
            "--poll-interval",
            "100ms",
            "--batch-size",
            "10",
        ],
    )
    .env("DATABASE_URL", proxy.url())
    .stdout(Stdio::null())
    .stderr(stderr.stdio())
    .spawn()
    .unwrap();
    let _relay = Running(child);

    let mut text = String::new();
    let published = std::cell::Cell::new(0.0);
    wait_for_showing(
        &format!("outbox_published_total to reach {N}"),
        || match get(port, "/metrics") {
            Some((200, body)) => {
                text = body;
                published.set(sum(&text, "outbox_published_total"));
                published.get() == N as f64
            }
            _ => false,
        },
        || format!("(it was {})\n{}", published.get(), stderr.text()),
    );
    for name in outbox_relay::metrics::ALL {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(text.contains(r#"topic="orders""#), "{text}");
    assert!(text.contains(r#"publisher="postgres""#), "{text}");
    assert_eq!(sum(&text, "outbox_breaker_open"), 0.0);
    assert_eq!(sum(&text, "outbox_publish_failures_total"), 0.0);
    assert_eq!(sum(&text, "outbox_dead_total"), 0.0);
    // Every row claimed once: the abandoned claim only after the reaper
    // recovered it.
    assert_eq!(
        sum(&text, "outbox_claim_batch_size_sum"),
        N as f64,
        "{text}"
    );
    assert_eq!(sum(&text, "outbox_lease_recovered_total"), 1.0, "{text}");
    assert_eq!(
        sum(&text, "outbox_commit_to_publish_seconds_count"),
        N as f64
    );
    // The backlog gauges come from a background count: wait for the one
    // after the relay drained everything.
    wait_for("the backlog gauges to show an empty outbox", || {
        get(port, "/metrics").is_some_and(|(_, m)| {
            m.contains(r#"outbox_messages{status="pending"} 0"#)
                && m.contains(r#"outbox_messages{status="dead"} 0"#)
        })
    });

    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
    let (code, body) = get(port, "/readyz").unwrap();
    assert_eq!(code, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["database"], "ok");
    assert_eq!(ready["publisher"], "ok");

    proxy.stop.stop();
    let mut body = String::new();
    wait_for("/readyz to answer 503", || match get(port, "/readyz") {
        Some((503, b)) => {
            body = b;
            true
        }
        _ => false,
    });
    let unready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(unready["status"], "unavailable", "{body}");
    assert_ne!(unready["database"], "ok", "{body}");
    // Alive all the same: a restart would not bring the database back.
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
}

#[tokio::test]
async fn a_lost_destination_opens_the_breaker_and_fails_readiness() {
    let t = TestSchema::new("cli_breaker").await;
    // The sink is the same database reached through a proxy: shutting the
    // proxy takes the destination away and leaves the outbox reachable.
    let proxy = Proxy::start(upstream());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = outbox(
        t.name(),
        &[
            "relay",
            "--metrics-addr",
            &addr,
            "--poll-interval",
            "100ms",
            "--publisher",
            &proxy.url(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let _relay = Running(child);
    wait_for("the relay to be ready", || {
        get(port, "/readyz").is_some_and(|(code, _)| code == 200)
    });
    proxy.stop.stop();
    common::pending(&t).await;
    wait_for("outbox_breaker_open to read 1", || {
        get(port, "/metrics").is_some_and(|(_, m)| {
            sum(&m, "outbox_breaker_open") == 1.0 && sum(&m, "outbox_released_total") >= 1.0
        })
    });
    let text = get(port, "/metrics").unwrap().1;
    assert!(
        sum(&text, r#"outbox_publish_failures_total{class="retryable"}"#) >= 1.0,
        "{text}"
    );
    // An outage spends no attempt: nothing went dead.
    assert_eq!(sum(&text, "outbox_dead_total"), 0.0, "{text}");
    let mut body = String::new();
    wait_for("/readyz to answer 503", || match get(port, "/readyz") {
        Some((503, b)) => {
            body = b;
            true
        }
        _ => false,
    });
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["database"], "ok", "{body}");
    assert_ne!(v["publisher"], "ok", "{body}");
}

#[tokio::test]
async fn a_taken_metrics_port_fails_the_start_in_one_line() {
    let t = TestSchema::new("cli_metrics_port").await;
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = fails(&t, &["relay", "--metrics-addr", &addr]);
    assert!(err.contains("cannot serve metrics on"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[tokio::test]
async fn passwords_never_reach_the_logs_even_at_debug() {
    let t = TestSchema::new("cli_redact").await;
    let closed = free_port();
    let cases = [
        // The database itself is unreachable.
        (
            format!("postgres://postgres:DbS3cretPw@127.0.0.1:{closed}/postgres"),
            "postgres".to_owned(),
        ),
        // The database answers (trust ignores the password) but the
        // publisher's database does not.
        (
            outbox_testkit::database_url().replacen("postgres@", "postgres:DbS3cretPw@", 1),
            format!("postgres://sink:SinkS3cretPw@127.0.0.1:{closed}/sink"),
        ),
    ];
    for (db, publisher) in &cases {
        for format in ["text", "json"] {
            let (ok, out, err) = run(outbox(
                t.name(),
                &[
                    "--log-format",
                    format,
                    "relay",
                    "--publisher",
                    publisher,
                    "--metrics-addr",
                    "127.0.0.1:0",
                ],
            )
            .env("DATABASE_URL", db)
            .env("RUST_LOG", "debug"));
            assert!(!ok, "{out}{err}");
            for secret in ["DbS3cretPw", "SinkS3cretPw"] {
                assert!(!out.contains(secret), "{secret} on stdout:\n{out}");
                assert!(!err.contains(secret), "{secret} on stderr:\n{err}");
            }
        }
    }
}

#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let t = TestSchema::new("cli_json_logs").await;
    common::pending(&t).await;
    let (ok, _, err) = run(
        outbox(t.name(), &["--log-format", "json", "relay", "--once"]).env("RUST_LOG", "debug"),
    );
    assert!(ok, "{err}");
    assert!(!err.trim().is_empty(), "expected debug logs");
    for line in err.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
    let (ok, _, err) = run(&mut bare(&["--log-format", "yaml", "stats"]));
    assert!(!ok);
    assert!(err.contains("log_format"), "{err}");
}

/// At the default log level the relay says, in one line, what it runs
/// against (the password redacted), and one more when it stops; exit codes
/// tell a configuration error (2) from a runtime one (1).
#[tokio::test]
async fn the_relay_says_what_it_runs_and_exit_codes_tell_config_from_runtime() {
    use std::io::{BufRead, BufReader};
    let t = TestSchema::new("cli_startup_line").await;
    let publisher =
        outbox_testkit::database_url().replacen("postgres@", "postgres:SinkS3cretPw@", 1);
    let mut child = outbox(t.name(), &["relay", "--publisher", &publisher])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    for part in [
        "relay running",
        &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        &format!("schema={}", t.name()),
        "pipelines=4",
        "ordering=\"aggregate\"",
        "postgres:***@",
    ] {
        assert!(first.contains(part), "{part} not in: {first}");
    }
    assert!(!first.contains("SinkS3cretPw"), "{first}");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success());
    assert!(
        rest.iter().any(|l| l.contains("shutdown requested")),
        "{rest:?}"
    );

    let code = |cmd: &mut std::process::Command| cmd.output().unwrap().status.code();
    assert_eq!(code(&mut bare(&["relay", "--batch-size", "0"])), Some(2));
    assert_eq!(code(&mut bare(&["relay", "--no-such-flag"])), Some(2));
    let closed = free_port();
    assert_eq!(
        code(bare(&["stats"]).env(
            "DATABASE_URL",
            format!("postgres://postgres@127.0.0.1:{closed}/postgres")
        )),
        Some(1)
    );
}
