//! Reading messages back with each broker's own client, in a second
//! process: the Python scripts under `tests/readback/`, run from the
//! virtualenv `scripts/test.sh` creates in `target/pyenv`.
//!
//! A reader is started before anything is published and returns once the
//! broker confirmed its subscription (the script prints `READY`), so a
//! test waits on that signal instead of sleeping. [`Reader::finish`] then
//! collects one JSON object per message the broker delivered.

use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with the read-back clients installed: `OUTBOX_TEST_PYTHON`,
/// or `target/pyenv/bin/python`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("OUTBOX_TEST_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let p = repo_root().join("target/pyenv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh once (it creates the virtualenv from tests/readback/requirements.txt)",
        p.display()
    );
    p
}

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/readback").join(name)
}

/// A read-back script running in the background.
#[derive(Debug)]
pub struct Reader {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Reader {
    /// Starts `tests/readback/<name>` with `args` and waits for its `READY`.
    pub async fn start(name: &str, args: &[String]) -> Self {
        let mut child = Command::new(python())
            .arg(script(name))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        match lines
            .next_line()
            .await
            .expect("read reader output")
            .as_deref()
        {
            Some("READY") => Self { child, lines },
            other => panic!("{name} did not get ready: {other:?}"),
        }
    }

    /// Waits for the script to exit and returns what it received, one JSON
    /// value per message, in delivery order.
    pub async fn finish(mut self) -> Vec<serde_json::Value> {
        let mut got = Vec::new();
        while let Some(line) = self.lines.next_line().await.expect("read reader output") {
            got.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")));
        }
        let status = self.child.wait().await.expect("reader exit");
        assert!(
            status.success(),
            "read-back script failed ({status}) after {} messages",
            got.len()
        );
        got
    }
}

/// Binds an exclusive queue to `exchange` (declared topic, durable) with
/// `binding`, and reads `count` messages: `{routing_key, exchange, body,
/// properties: {message_id, type, timestamp, content_type, delivery_mode,
/// headers}}`. The exchange is deleted at the end.
pub async fn amqp(exchange: &str, binding: &str, count: usize) -> Reader {
    Reader::start("amqp_readback.py", &amqp_args(exchange, binding, count)).await
}

/// As [`amqp`], but reads until `count` distinct `message_id`s have
/// arrived, returning the duplicates too: for tests where the relay may
/// publish a message more than once (a broker outage mid-batch).
pub async fn amqp_distinct(exchange: &str, binding: &str, count: usize) -> Reader {
    let mut args = amqp_args(exchange, binding, count);
    args.push("--distinct".into());
    Reader::start("amqp_readback.py", &args).await
}

fn amqp_args(exchange: &str, binding: &str, count: usize) -> Vec<String> {
    vec![
        "--exchange".into(),
        exchange.into(),
        "--binding".into(),
        binding.into(),
        "--count".into(),
        count.to_string(),
        "--delete-exchange".into(),
    ]
}

/// Subscribes to `filter` at QoS 1 and reads `count` messages:
/// `{topic, qos, body}`.
pub async fn mqtt(filter: &str, count: usize) -> Reader {
    Reader::start("mqtt_readback.py", &mqtt_args(filter, count)).await
}

/// As [`mqtt`], but reads until `count` distinct `event_id`s have arrived,
/// returning the duplicates too.
pub async fn mqtt_distinct(filter: &str, count: usize) -> Reader {
    let mut args = mqtt_args(filter, count);
    args.push("--distinct".into());
    Reader::start("mqtt_readback.py", &args).await
}

fn mqtt_args(filter: &str, count: usize) -> Vec<String> {
    vec![
        "--topic".into(),
        filter.into(),
        "--count".into(),
        count.to_string(),
    ]
}

/// Every entry of the Redis stream `stream`, oldest first, read with
/// redis-py once the test has published: `{id, fields}`.
pub async fn redis_stream(url: &str, stream: &str) -> Vec<serde_json::Value> {
    read_all("redis_readback.py", &[url, stream]).await
}

/// Every message of the JetStream stream `stream`, oldest first, read with
/// nats-py once the test has published: `{subject, headers, data}`.
pub async fn nats_stream(url: &str, stream: &str) -> Vec<serde_json::Value> {
    read_all("nats_readback.py", &[url, stream]).await
}

/// Runs a script that reads what is there and exits (no `READY` line).
async fn read_all(name: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(python())
        .arg(script(name))
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Checks webhook signatures with an implementation independent of ours
/// (`standardwebhooks` for `whsec_` secrets, Python's hmac otherwise).
/// `requests` is a JSON array of `{id, timestamp, signature, body}`.
/// Returns the number verified; panics on any mismatch.
pub async fn verify_webhooks(secret: &str, requests: &serde_json::Value) -> usize {
    let dir = std::env::temp_dir().join(format!("outbox-webhooks-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("requests.json");
    std::fs::write(&file, requests.to_string()).expect("write requests");
    let out = Command::new(python())
        .arg(script("verify_webhooks.py"))
        .arg("--secret")
        .arg(secret)
        .arg("--requests")
        .arg(&file)
        .output()
        .await
        .expect("run verify_webhooks.py");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "independent signature check failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .trim()
        .strip_prefix("verified=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"))
}
