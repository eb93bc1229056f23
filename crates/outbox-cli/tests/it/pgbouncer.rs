//! Through a real PgBouncer (Debian's `pgbouncer`) in transaction mode,
//! with fewer server connections than clients so that they share them:
//! producers enqueue with the library and with plain SQL, `outbox migrate`
//! applies the schema, and the relay delivers everything with the
//! README's settings (`--notify off`). With `--notify on` it says at start
//! that LISTEN cannot work there, and delivers all the same by polling.

use crate::common;

use common::net::Running;
use outbox_tempdb::{EmbeddedPostgres, PgBouncer};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

fn outbox(url: &str, args: &[&str]) -> Command {
    let mut cmd = common::bare(args);
    cmd.env("DATABASE_URL", url);
    cmd
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A count, read directly from the server (not through the pooler).
async fn count(url: &str, sql: &str) -> i64 {
    connect(url).await.query_one(sql, &[]).await.unwrap().get(0)
}

async fn wait_for_count(url: &str, sql: &str, want: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = count(url, sql).await;
        if got >= want || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` orders, each with its event in the same transaction, from `tasks`
/// clients at once through `url`: half through the library, half as the
/// README's plain SQL.
async fn produce(url: &str, tasks: usize, n: usize) {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let url = url.to_owned();
        handles.push(tokio::spawn(async move {
            let mut client = connect(&url).await;
            let outbox = outbox::Outbox::new("outbox").unwrap();
            for i in 0..n {
                let tx = client.transaction().await.unwrap();
                let order: i64 = tx
                    .query_typed_one(
                        "INSERT INTO orders (task) VALUES ($1) RETURNING id",
                        &[(&(t as i32), tokio_postgres::types::Type::INT4)],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if i % 2 == 0 {
                    let msg = outbox::NewMessage::new(
                        "order.created",
                        "order",
                        order.to_string(),
                        &json!({ "order": order }),
                    )
                    .unwrap();
                    outbox.enqueue(&tx, &msg).await.unwrap();
                } else {
                    tx.batch_execute(&format!(
                        "INSERT INTO outbox.messages \
                           (event_type, aggregate_type, aggregate_id, topic, payload) \
                         VALUES ('order.created', 'order', '{order}', 'orders', \
                                 '{{\"order\": {order}}}')"
                    ))
                    .await
                    .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

fn relay(url: &str, notify: &str) -> (Running, std::path::PathBuf) {
    let log = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let path = log.to_path_buf();
    log.keep().unwrap();
    let child = outbox(
        url,
        &[
            "relay",
            "--notify",
            notify,
            "--poll-interval",
            "200ms",
            "--batch-size",
            "50",
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&path).unwrap())
    .spawn()
    .map(Running)
    .unwrap();
    (child, path)
}

fn stop(mut relay: Running, log: &std::path::Path) -> String {
    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    let status = relay.0.wait().unwrap();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    assert!(
        status.success(),
        "clean exit after SIGTERM: {status:?}\n{text}"
    );
    text
}

const SENT: &str = "SELECT count(*) FROM outbox.all_messages WHERE status = 'sent'";
const DELIVERED: &str = "SELECT count(DISTINCT message_id) FROM outbox.published_events";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn everything_works_through_transaction_mode_pgbouncer() {
    let _solo = common::solo().await;
    let pg = EmbeddedPostgres::start(false).expect("a private PostgreSQL for this test");
    // Two server connections for a relay's pool, its LISTEN connection and
    // four producers: every client's statements land on shared backends.
    let bouncer =
        PgBouncer::start("127.0.0.1", pg.port(), "postgres", "transaction", 2).expect("pgbouncer");
    let direct = pg.url();
    let pooled = bouncer.url();

    for expect in ["applied", "up to date"] {
        let out = outbox(&pooled, &["migrate"]).output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "migrate through pgbouncer: {stderr}");
        assert!(stdout.contains(expect), "{stdout}");
    }
    connect(&direct)
        .await
        .batch_execute("CREATE TABLE orders (id bigserial PRIMARY KEY, task int NOT NULL)")
        .await
        .unwrap();

    // The README's settings: no LISTEN behind a transaction-mode pooler.
    let (r, log) = relay(&pooled, "off");
    produce(&pooled, 4, 100).await;
    assert_eq!(count(&direct, "SELECT count(*) FROM orders").await, 400);
    let sent = wait_for_count(&direct, SENT, 400).await;
    let stderr = stop(r, &log);
    assert_eq!(
        sent,
        400,
        "every message sent through pgbouncer:\n{stderr}\n{}",
        bouncer.log()
    );
    assert_eq!(count(&direct, DELIVERED).await, 400);
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("WARN"),
        "a quiet run:\n{stderr}"
    );

    // NOTIFY left on: one clear warning at start, and polling delivers.
    let (r, log) = relay(&pooled, "on");
    produce(&pooled, 2, 50).await;
    let sent = wait_for_count(&direct, SENT, 500).await;
    tokio::time::sleep(outbox_relay::listener::PROBE_WAIT + Duration::from_secs(1)).await;
    let stderr = stop(r, &log);
    assert_eq!(sent, 500, "{stderr}");
    assert_eq!(
        stderr.matches("LISTEN received nothing").count(),
        1,
        "one warning that LISTEN cannot work through the pooler:\n{stderr}"
    );
    assert!(stderr.contains("--notify off"), "{stderr}");
    assert_eq!(
        count(
            &direct,
            "SELECT count(*) FROM outbox.all_messages WHERE status <> 'sent'"
        )
        .await,
        0
    );
}

/// Straight to PostgreSQL, the same probe finds LISTEN working: no warning.
#[tokio::test]
async fn no_pooler_warning_on_a_direct_connection() {
    let _solo = common::solo().await;
    let pg = EmbeddedPostgres::start(false).expect("a private PostgreSQL for this test");
    let url = pg.url();
    assert!(outbox(&url, &["migrate"]).status().unwrap().success());
    let (r, log) = relay(&url, "on");
    tokio::time::sleep(outbox_relay::listener::PROBE_WAIT + Duration::from_secs(2)).await;
    let stderr = stop(r, &log);
    assert!(!stderr.contains("LISTEN received nothing"), "{stderr}");
}
