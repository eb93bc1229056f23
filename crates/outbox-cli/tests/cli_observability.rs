//! Observability on the real binary: `/metrics`, `/healthz` and `/readyz`
//! of a running relay, `outbox stats`, and logs that never carry passwords.

mod common;

use common::{bare, fails, ok, outbox, run};
use outbox_testkit::TestSchema;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Waits for `cond` up to a generous deadline; no timing is asserted.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` → (status, body), or `None` if nothing answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Sum of every sample of `name` in a Prometheus text exposition.
fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A relay process, killed when dropped (a failing test must not leave it).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP proxy to the test PostgreSQL, so the test can take the database
/// away from the relay (and only from the relay) by shutting the proxy.
struct Proxy {
    port: u16,
    stop: proxy_stop::Stop,
}

mod proxy_stop {
    //! The proxy runs on plain threads; `Stop` closes the listener and every
    //! connection it forwarded.
    use std::net::{Shutdown, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub struct Stop {
        pub stopped: Arc<AtomicBool>,
        pub conns: Arc<Mutex<Vec<TcpStream>>>,
    }

    impl Stop {
        pub fn track(&self, s: &TcpStream) {
            if let Ok(c) = s.try_clone() {
                self.conns.lock().unwrap().push(c);
            }
        }

        pub fn is_stopped(&self) -> bool {
            self.stopped.load(Ordering::SeqCst)
        }

        pub fn stop(&self) {
            self.stopped.store(true, Ordering::SeqCst);
            for c in self.conns.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = proxy_stop::Stop::default();
        let s = stop.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if s.is_stopped() {
                    // Refuse: drop the connection as soon as it arrives.
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                s.track(&client);
                s.track(&server);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self { port, stop }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

/// The test database's address, from `DATABASE_URL`.
fn upstream() -> SocketAddr {
    let cfg: tokio_postgres::Config = outbox_testkit::database_url().parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => "127.0.0.1".to_owned(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let host = if host == "localhost" {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    format!("{host}:{port}").parse().unwrap()
}

#[tokio::test]
async fn relay_serves_metrics_and_readiness_until_the_database_goes() {
    const N: i64 = 37;
    let t = TestSchema::new("cli_metrics").await;
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', i::text, CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'refunds' END, '{{}}' \
           FROM generate_series(1, {N}) AS i"
    ))
    .await;
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
            "--batch-size",
            "10",
        ],
    )
    .env("DATABASE_URL", proxy.url())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let _relay = Running(child);

    let mut text = String::new();
    wait_for("outbox_published_total to reach N", || {
        match get(port, "/metrics") {
            Some((200, body)) => {
                text = body;
                sum(&text, "outbox_published_total") == N as f64
            }
            _ => false,
        }
    });
    for name in outbox_relay::metrics::ALL {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(text.contains(r#"topic="orders""#), "{text}");
    assert!(text.contains(r#"publisher="postgres""#), "{text}");
    assert_eq!(sum(&text, "outbox_breaker_open"), 0.0);
    assert_eq!(sum(&text, "outbox_publish_failures_total"), 0.0);
    assert_eq!(sum(&text, "outbox_dead_total"), 0.0);
    assert_eq!(sum(&text, "outbox_claim_batch_size_count"), 4.0, "{text}");
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
async fn a_taken_metrics_port_fails_the_start_in_one_line() {
    let t = TestSchema::new("cli_metrics_port").await;
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = fails(&t, &["relay", "--metrics-addr", &addr]);
    assert!(err.contains("cannot serve metrics on"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

async fn stats_fixture(t: &TestSchema) {
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, locked_by, locked_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', '1', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now() - interval '2 hours'), \
                ('e', 'a', '2', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now()), \
                ('e', 'a', '3', 'orders', '{}', 'processing', 1, 'r', now(), NULL, NULL, now()), \
                ('e', 'a', '4', 'refunds', '{}', 'failed', 2, NULL, NULL, NULL, NULL, now()), \
                ('e', 'a', '5', 'refunds', '{}', 'dead', 9, NULL, NULL, now(), 'x', now()); \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 1000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 'orders', '{}', '{}', 1, \
                now(), now(), now() FROM generate_series(1, 4) AS i; \
         INSERT INTO {schema}.archived_messages (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, status, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 2000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 'refunds', '{}', '{}', \
                CASE WHEN i = 1 THEN 'dead' ELSE 'sent' END, 1, now(), now(), now() \
           FROM generate_series(1, 3) AS i;",
    )
    .await;
}

#[tokio::test]
async fn stats_json_counts_equal_the_tables() {
    let t = TestSchema::new("cli_stats").await;
    stats_fixture(&t).await;
    let v: serde_json::Value = serde_json::from_str(&ok(&t, &["stats", "--json"])).unwrap();
    for status in ["pending", "processing", "failed", "dead", "sent"] {
        let want = t
            .count(&format!(
                "SELECT count(*) FROM {{schema}}.all_messages WHERE status = '{status}'"
            ))
            .await;
        assert_eq!(v["counts"][status], want, "{status}: {v}");
    }
    for status in ["sent", "dead"] {
        let want = t
            .count(&format!(
                "SELECT count(*) FROM {{schema}}.archived_messages WHERE status = '{status}'"
            ))
            .await;
        assert_eq!(v["archived"][status], want, "archived {status}: {v}");
    }
    assert_eq!(v["dead"], 1);
    assert_eq!(v["topics"]["orders"]["counts"]["pending"], 2);
    assert_eq!(v["topics"]["orders"]["counts"]["sent"], 4);
    assert_eq!(v["topics"]["refunds"]["archived"]["sent"], 2);
    let age = v["oldest_pending_age_seconds"].as_f64().unwrap();
    assert!(age >= 7000.0, "{v}");

    let only: serde_json::Value =
        serde_json::from_str(&ok(&t, &["stats", "--json", "--topic", "refunds"])).unwrap();
    assert_eq!(only["counts"]["pending"], 0, "{only}");
    assert_eq!(only["counts"]["failed"], 1, "{only}");
    assert_eq!(only["archived"]["dead"], 1, "{only}");
    assert!(only["topics"].get("orders").is_none(), "{only}");

    let text = ok(&t, &["stats"]);
    assert!(text.contains("pending=2\n"), "{text}");
    assert!(text.contains("archived_sent=2\n"), "{text}");
    assert!(text.contains("topic \"orders\": pending=2"), "{text}");
}

#[tokio::test]
async fn stats_fails_when_the_oldest_pending_is_too_old() {
    let t = TestSchema::new("cli_stats_alert").await;
    stats_fixture(&t).await;
    ok(&t, &["stats", "--fail-if-oldest-pending-over", "3h"]);
    let err = fails(&t, &["stats", "--fail-if-oldest-pending-over", "1h"]);
    assert!(err.contains("oldest pending message is"), "{err}");
    assert!(err.contains("over the limit of 1h"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let err = fails(&t, &["stats", "--fail-if-oldest-pending-over", "soon"]);
    assert!(err.contains("--fail-if-oldest-pending-over"), "{err}");
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
