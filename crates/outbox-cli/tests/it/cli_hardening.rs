//! Hostile input through the real binary: what a producer or receiver wrote
//! reaches the operator's terminal as text, and a publisher URL that cannot
//! work stops the relay before it claims anything.

use crate::common;

use common::net::{free_port, get, wait_for, Running};
use common::{fails, ok, outbox, pending};
use outbox_testkit::TestSchema;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Window title, screen clear, carriage return, 8-bit CSI, DEL, bidi override.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}31m\u{7f}\u{202e}";

fn assert_inert(out: &str) {
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{9b}', '\u{7f}', '\u{202e}'] {
        assert!(!out.contains(bad), "raw {bad:?} in output:\n{out:?}");
    }
}

#[tokio::test]
async fn dead_letters_print_escape_sequences_as_text() {
    let t = TestSchema::new("cli_dead_escapes").await;
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           headers, status, attempts, last_error, dead_at, dead_reason) \
         VALUES ($1, $1, $1, $1, jsonb_build_object('k', $1::text), jsonb_build_object($1::text, $1::text), \
           'dead', 3, $1, now(), $1) RETURNING id",
        t.schema.quoted()
    );
    let id: i64 = client.query_one(&sql, &[&HOSTILE]).await.unwrap().get(0);
    let id = id.to_string();
    let list = ok(&t, &["dead", "list"]);
    assert_inert(&list);
    assert!(list.contains("\\u001b]0;pwned\\u0007"), "{list}");
    let show = ok(&t, &["dead", "show", &id]);
    assert_inert(&show);
    assert!(show.contains("pwned"), "{show}");
    for args in [
        &["dead", "list", "--json"][..],
        &["dead", "show", &id, "--json"],
    ] {
        let json = ok(&t, args);
        assert_inert(&json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let text = v.to_string();
        // The value survives: the JSON means the same strings.
        assert!(text.contains("\\u001b]0;pwned\\u0007"), "{text}");
        assert!(
            serde_json::to_string(&v).unwrap().contains('\u{9b}'),
            "{text}"
        );
    }
    for args in [&["stats"][..], &["stats", "--json"]] {
        assert_inert(&ok(&t, args));
    }
}

#[tokio::test]
async fn a_publisher_url_that_cannot_work_stops_the_relay_before_any_claim() {
    let t = TestSchema::new("cli_http_no_host").await;
    let ids = [pending(&t).await, pending(&t).await];
    for url in [
        "http://",
        "https://",
        "http://:8080/hook",
        "http://h:99999/",
    ] {
        let err = fails(&t, &["relay", "--once", "--publisher", url]);
        assert!(err.contains("http publisher"), "{url}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{url}: {err}");
    }
    // Every other publisher's URL is checked whole before any claim.
    for url in [
        "nats://",
        "nats://h:1,:2",
        "nats://h:1,h2:x",
        "redis://",
        "redis://h:0",
        "asynq://",
        "mqtt://",
        "mqtt://h:0",
        "amqp://",
        "amqp://h:1?heartbeet=5",
        "kafka://",
        "kafka://h:1,",
        "kafka://h:1?compression.typo=lz4",
    ] {
        let err = fails(&t, &["relay", "--once", "--publisher", url]);
        assert!(err.contains("publisher"), "{url}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{url}: {err}");
    }
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT count(*) FROM {}.all_messages WHERE id = ANY($1) AND status = 'pending' AND attempts = 0",
        t.schema.quoted()
    );
    let n: i64 = client.query_one(&sql, &[&&ids[..]]).await.unwrap().get(0);
    assert_eq!(n, 2);
}

/// The relay's metrics server (`HEADER_READ_TIMEOUT` = 5 s) against 200
/// idle connections and a slowloris client.
#[tokio::test]
async fn the_metrics_server_outlasts_idle_and_slowloris_connections() {
    let t = TestSchema::new("cli_slowloris").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = outbox(t.name(), &["relay", "--metrics-addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _relay = Running(child);
    wait_for("/healthz", || {
        get(port, "/healthz").is_some_and(|(s, _)| s == 200)
    });

    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let opened = Instant::now();
    let header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed_after = None;
    let mut answered_meanwhile = false;
    for byte in header.iter().cycle().take(30) {
        // One header byte a second, as long as the server takes it.
        if slow.write_all(&[*byte]).is_err() {
            closed_after = Some(opened.elapsed());
            break;
        }
        let mut buf = [0u8; 256];
        match slow.read(&mut buf) {
            Ok(0) => {
                closed_after = Some(opened.elapsed());
                break;
            }
            // A 408 before closing is fine too.
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed_after = Some(opened.elapsed());
                break;
            }
        }
        // Meanwhile /healthz answers a new client at once.
        if !answered_meanwhile {
            let started = Instant::now();
            let ok = get(port, "/healthz").is_some_and(|(s, body)| s == 200 && body == "ok\n");
            assert!(
                ok && started.elapsed() < Duration::from_secs(2),
                "/healthz did not answer"
            );
            answered_meanwhile = true;
        }
        std::thread::sleep(Duration::from_millis(800));
    }
    let closed_after = closed_after.expect("the slowloris connection was never closed");
    assert!(
        closed_after < Duration::from_secs(10),
        "slowloris held its connection {closed_after:?}"
    );
    // The idle connections were closed by the same timeout.
    let mut still_open = 0;
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 64];
        if let Err(e) = c.read(&mut buf) {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                still_open += 1;
            }
        }
    }
    assert_eq!(
        still_open, 0,
        "idle connections outlived the header read timeout"
    );
    assert!(get(port, "/healthz").is_some_and(|(s, _)| s == 200));
}

#[tokio::test]
async fn a_metrics_address_beyond_loopback_is_warned_about() {
    let t = TestSchema::new("cli_metrics_public").await;
    let port = free_port();
    let mut child = outbox(
        t.name(),
        &["relay", "--metrics-addr", &format!("0.0.0.0:{port}")],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let _relay = Running(child);
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text.contains("beyond this host") && Instant::now() < deadline {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    assert!(
        text.contains("WARN") && text.contains("beyond this host"),
        "{text}"
    );
}

/// Beyond `MAX_CONNECTIONS` (256) a connection waits in the listen backlog
/// until one closes: with 300 idle sockets open, /healthz is answered only
/// once the header read timeout (5 s) has closed some of them. The server
/// neither falls over nor grows without bound.
#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let t = TestSchema::new("cli_conn_limit").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = outbox(t.name(), &["relay", "--metrics-addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _relay = Running(child);
    wait_for("/healthz", || {
        get(port, "/healthz").is_some_and(|(s, _)| s == 200)
    });
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let started = Instant::now();
    assert!(get(port, "/healthz").is_some_and(|(s, _)| s == 200));
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "/healthz answered after {waited:?}"
    );
    // It got a slot only because an idle connection was closed first.
    let closed = idle
        .into_iter()
        .filter(|c| {
            c.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut buf = [0u8; 16];
            matches!((&*c).read(&mut buf), Ok(0))
                || matches!((&*c).read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
        })
        .count();
    assert!(
        closed > 0,
        "/healthz was served while all 300 idle connections were open"
    );
}
