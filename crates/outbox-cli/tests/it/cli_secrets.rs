//! No secret reaches any output: every form of connection string and
//! publisher URL, run through the real binary at the most verbose log level,
//! and what it says instead is still useful.

use crate::common;

use common::{outbox, pending, run};
use outbox_testkit::TestSchema;

const SECRET: &str = "s3cr3t-XYZ";

/// Runs `cmd` with `RUST_LOG=trace`, asserts the secret appears on neither
/// stream and returns (exit ok, stdout + stderr).
fn run_traced(cmd: &mut std::process::Command) -> (bool, String) {
    let (ok, out, err) = run(cmd.env("RUST_LOG", "trace"));
    let all = format!("{out}{err}");
    assert!(!all.contains(SECRET), "the secret leaked:\n{all}");
    (ok, all)
}

fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Every way of writing a PostgreSQL password, for an unreachable server.
fn unreachable_database_urls() -> Vec<String> {
    let port = closed_port();
    vec![
        format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/postgres"),
        format!("postgres://postgres@127.0.0.1:{port}/postgres?password={SECRET}"),
        format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable&password={SECRET}"),
        format!("postgres://postgres:a/b#c?d@{SECRET}@127.0.0.1:{port}/postgres"),
        format!("host=127.0.0.1 port={port} dbname=x user=postgres password={SECRET}"),
        format!("host=127.0.0.1 port={port} dbname=x user=postgres password = {SECRET}"),
        format!("host=127.0.0.1 port={port} dbname=x password='first {SECRET}' user=postgres"),
        format!(r"host=127.0.0.1 port={port} dbname=x password='it\'s {SECRET}'"),
    ]
}

#[tokio::test]
async fn an_unreachable_database_is_named_without_its_password() {
    let t = TestSchema::new("cli_secret_db").await;
    for url in unreachable_database_urls() {
        for args in [&["migrate"][..], &["relay", "--once"], &["stats"]] {
            let (ok, all) = run_traced(outbox(t.name(), args).env("DATABASE_URL", &url));
            assert!(!ok, "{url}: {all}");
            assert!(all.contains("cannot connect to"), "{url}: {all}");
            assert!(all.contains("127.0.0.1"), "{url}: {all}");
        }
    }
}

#[tokio::test]
async fn config_check_hides_every_password_form() {
    let t = TestSchema::new("cli_secret_config").await;
    for url in unreachable_database_urls() {
        let (_, all) = run_traced(outbox(t.name(), &["config", "check"]).env("DATABASE_URL", &url));
        assert!(all.contains("database_url"), "{url}: {all}");
    }
    let file = std::env::temp_dir().join(format!("outbox-secret-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "database_url = \"host=h password='a {SECRET}'\"\n\
             publisher = \"nats://h:4222?token={SECRET}\"\n"
        ),
    )
    .unwrap();
    let (_, all) = run_traced(&mut outbox(
        t.name(),
        &["--config", file.to_str().unwrap(), "config", "check"],
    ));
    std::fs::remove_file(&file).ok();
    assert!(all.contains("publisher"), "{all}");
    // Whole-value secrets (keys without a flag) print as `***`.
    let (ok, all) = run_traced(
        outbox(t.name(), &["config", "check"])
            .env("OUTBOX_UI_TOKEN", format!("token-{SECRET}-0123456789"))
            .env("OUTBOX_WEBHOOK_SECRET", SECRET),
    );
    assert!(ok, "{all}");
    for key in ["ui_token", "webhook_secret"] {
        assert!(all.contains(&format!("{key} = \"***\"")), "{all}");
    }
}

#[tokio::test]
async fn a_bad_publisher_url_is_refused_without_its_secret() {
    let t = TestSchema::new("cli_secret_publisher").await;
    let id = pending(&t).await;
    for (publisher, says) in [
        // A misspelt librdkafka property: librdkafka echoes the value.
        (
            format!("kafka://127.0.0.1:9092?sasl.pasword={SECRET}"),
            "sasl.pasword",
        ),
        (
            format!("kafka://127.0.0.1:9092?sasl.password={SECRET}&bogus=1"),
            "bogus",
        ),
        // An unknown option whose name does not look like a secret.
        (
            format!("redis://127.0.0.1:6379?pasword={SECRET}"),
            "pasword",
        ),
        (format!("nats://127.0.0.1:4222?tokn={SECRET}"), "tokn"),
        (format!("mqtt://127.0.0.1:1883?pw={SECRET}"), "pw"),
        (
            format!("amqp://127.0.0.1:5672?heartbeet={SECRET}"),
            "heartbeet",
        ),
        (format!("foo://127.0.0.1:1?token={SECRET}"), "foo"),
        (format!("fo o://u:{SECRET}@h"), "publisher"),
    ] {
        let (ok, all) = run_traced(&mut outbox(
            t.name(),
            &["relay", "--once", "--publisher", &publisher],
        ));
        assert!(!ok, "{publisher}: {all}");
        assert!(all.contains(says), "{publisher}: {all}");
    }
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT status, attempts FROM {}.all_messages WHERE id = $1",
        t.schema.quoted()
    );
    let row = client.query_one(&sql, &[&id]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "pending");
    assert_eq!(row.get::<_, i32>(1), 0);
}

#[tokio::test]
async fn broker_clients_do_not_log_credentials_at_trace() {
    let t = TestSchema::new("cli_secret_nats").await;
    pending(&t).await;
    // The NATS server on this machine takes no credentials: it answers the
    // CONNECT (which async-nats traces, password and all) and the publish
    // then fails or succeeds; either way the password must stay unseen.
    for publisher in [
        format!("nats://outbox:{SECRET}@127.0.0.1:4222"),
        format!("amqp://guest:{SECRET}@127.0.0.1:5672/%2f"),
        format!("redis://default:{SECRET}@127.0.0.1:6379/0"),
        format!("mqtt://outbox:{SECRET}@127.0.0.1:1883"),
    ] {
        let (_, all) = run_traced(&mut outbox(
            t.name(),
            &["relay", "--once", "--publisher", &publisher],
        ));
        assert!(all.contains("claimed=") || all.contains("error"), "{all}");
    }
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT coalesce(string_agg(last_error, ' '), '') FROM {}.all_messages",
        t.schema.quoted()
    );
    let stored: String = client.query_one(&sql, &[]).await.unwrap().get(0);
    assert!(!stored.contains(SECRET), "{stored}");
}
