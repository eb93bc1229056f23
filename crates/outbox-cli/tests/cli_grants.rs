//! The documented least-privilege roles are enough, and no more: the relay
//! runs under its role, a producer can enqueue but not tamper.

mod common;

use common::run;
use outbox::{NewMessage, Outbox};
use outbox_testkit::{database_url, TestSchema};
use std::process::Command;

/// The test database's connection string, as `role`.
fn url_as(role: &str) -> String {
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    format!(
        "host={host} port={} dbname={} user={role}",
        cfg.get_ports().first().copied().unwrap_or(5432),
        cfg.get_dbname().unwrap_or("postgres")
    )
}

fn outbox_as(role: &str, schema: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOX_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("DATABASE_URL", url_as(role))
        .env_remove("RUST_LOG")
        .args(["--schema", schema])
        .args(args);
    run(&mut cmd)
}

#[tokio::test]
async fn relay_and_producer_work_under_the_granted_roles_only() {
    let t = TestSchema::new("cli_grants").await;
    let suffix = format!("{:08x}", rand::random::<u32>());
    let (producer, relay) = (format!("t_producer_{suffix}"), format!("t_relay_{suffix}"));
    t.exec(&format!(
        "CREATE ROLE {producer} LOGIN; CREATE ROLE {relay} LOGIN;"
    ))
    .await;

    let (ok, out, err) = run(Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", database_url())
        .args([
            "--schema",
            t.name(),
            "grants",
            "--producer",
            &producer,
            "--relay",
            &relay,
            "--apply",
        ]));
    assert!(ok, "{err}");
    assert!(out.starts_with("granted"), "{out}");

    // The producer enqueues in its own transaction.
    let (mut client, conn) = tokio_postgres::connect(&url_as(&producer), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let outbox = Outbox::with_schema(t.schema.clone());
    let tx = client.transaction().await.unwrap();
    let msgs: Vec<NewMessage> = (0..3)
        .map(|i| NewMessage::new("e", "a", i.to_string(), &serde_json::json!({"i": i})).unwrap())
        .collect();
    outbox.enqueue_many(&tx, &msgs).await.unwrap();
    outbox.enqueue(&tx, &msgs[0]).await.unwrap();
    tx.commit().await.unwrap();
    // ... but cannot mark anything sent, nor read other events' payloads.
    let tamper = format!("UPDATE {}.messages SET status = 'sent'", t.schema.quoted());
    let denied = client.batch_execute(&tamper).await.unwrap_err();
    assert!(
        outbox::describe_tokio_postgres(&denied).contains("permission denied"),
        "{denied}"
    );
    let peek = format!("SELECT payload FROM {}.messages", t.schema.quoted());
    assert!(client.batch_execute(&peek).await.is_err());

    // The relay does its whole job under its role.
    let (ok, out, err) = outbox_as(&relay, t.name(), &["relay", "--once"]);
    assert!(ok, "{err}");
    assert_eq!(out, "claimed=4 published=4 marked_sent=4 failed=0\n");
    let (ok, out, err) = outbox_as(&relay, t.name(), &["archive", "--older-than", "0s"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().last(), Some("archived=4"));
    let (ok, _, err) = outbox_as(&relay, t.name(), &["dead", "list"]);
    assert!(ok, "{err}");
    // ... and cannot change the schema.
    let (ok, _, err) = outbox_as(&relay, t.name(), &["migrate"]);
    assert!(!ok && err.contains("permission denied"), "{err}");

    drop(client);
    t.exec(&format!(
        "DROP OWNED BY {producer}, {relay}; DROP ROLE {producer}; DROP ROLE {relay};"
    ))
    .await;
}
