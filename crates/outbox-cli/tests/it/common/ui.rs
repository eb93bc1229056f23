//! The operator page under test: `outbox ui` started on a free port, an
//! HTTP client that shows redirects as they are, and a bare SSE reader.

use super::net::{free_port, get, wait_for, Running};
use super::outbox;
use outbox_testkit::TestSchema;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The token the tests start the page with.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// `outbox ui` on a free loopback port, once it answers.
pub fn start(t: &TestSchema, extra: &[&str], token: Option<&str>) -> (Running, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["ui", "--addr", addr.as_str()];
    args.extend(extra);
    let mut cmd = outbox(t.name(), &args);
    if let Some(tok) = token {
        cmd.env("OUTBOX_UI_TOKEN", tok);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ui = Running(child);
    wait_for("the operator page to answer", || {
        get(port, "/assets/ui.css").is_some()
    });
    (ui, port)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Opens `/events` and collects `(seq, data)` of each snapshot event for
/// `how_long`, or until `n` arrived.
pub async fn sse_events(port: u16, n: usize, how_long: Duration) -> Vec<(u64, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(s).lines();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + how_long;
    while got.len() < n {
        let line = match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            _ => break,
        };
        // Chunked framing leaves size lines between events; only data matters.
        if let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            got.push((v["seq"].as_u64().unwrap(), data.to_owned()));
        }
    }
    got
}
