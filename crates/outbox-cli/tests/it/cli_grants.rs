//! The documented least-privilege roles are enough, and no more: the relay
//! runs under its role, a producer can enqueue but not tamper.

use crate::common;

use common::{run, url_as};
use outbox::{NewMessage, Outbox};
use outbox_testkit::{database_url, TestSchema};
use std::process::Command;

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

/// A statement the server refuses is one line on stderr with the server's
/// message said once, though it travels as a chain (the command's, the
/// library's "database error", the driver's).
#[tokio::test]
async fn a_refused_statement_prints_the_server_message_once() {
    let t = TestSchema::unmigrated("cli_grants_refused").await;
    let role = format!("t_nobody_{:08x}", rand::random::<u32>());
    t.exec(&format!("CREATE ROLE {role} LOGIN;")).await;

    let (ok, _, err) = outbox_as(&role, t.name(), &["migrate"]);
    assert!(!ok, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: database error: "), "{err}");
    assert_eq!(err.matches("permission denied").count(), 1, "{err}");
    assert!(err.contains("(SQLSTATE 42501)"), "{err}");

    t.exec(&format!("DROP ROLE {role};")).await;
}

/// Runs `sql` as whoever `client` is, expecting PostgreSQL to refuse it for
/// lack of privilege.
async fn denied(client: &tokio_postgres::Client, sql: &str) {
    let err = client
        .batch_execute(sql)
        .await
        .expect_err(&format!("{sql} should be refused"));
    let text = outbox::describe_tokio_postgres(&err);
    assert!(text.contains("permission denied"), "{sql}: {text}");
}

#[tokio::test]
async fn a_producer_can_only_enqueue_new_pending_messages_and_use_the_inbox() {
    let t = TestSchema::new("cli_grants_producer").await;
    let suffix = format!("{:08x}", rand::random::<u32>());
    let (producer, relay) = (format!("t_producer_{suffix}"), format!("t_relay_{suffix}"));
    // What an older build's `outbox grants` gave: applying again takes it back.
    t.exec(&format!(
        "CREATE ROLE {producer} LOGIN; CREATE ROLE {relay} LOGIN; \
         GRANT USAGE ON SCHEMA {{schema}} TO {producer}; \
         GRANT INSERT ON {{schema}}.messages TO {producer}; \
         GRANT SELECT ON {{schema}}.all_messages TO {producer};"
    ))
    .await;
    let (ok, _, err) = run(Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", database_url())
        .args(["--schema", t.name(), "grants"])
        .args(["--producer", &producer, "--relay", &relay, "--apply"]));
    assert!(ok, "{err}");
    // Something to peek at: another producer's event, dead and replayed.
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, dead_at, dead_reason) VALUES ('e', 'a', '1', 't', '{\"secret\": 1}', 'dead', now(), 'x'); \
         INSERT INTO {schema}.dead_replays (message_id, replayed_by, attempts) VALUES (1, 'op', 1);",
    )
    .await;

    let (client, conn) = tokio_postgres::connect(&url_as(&producer), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let s = t.schema.quoted();

    // No payload, status or history of any message is readable.
    for table in [
        "messages",
        "messages_sent",
        "all_messages",
        "dead_replays",
        "archived_messages",
        "published_events",
    ] {
        denied(&client, &format!("SELECT * FROM {s}.{table}")).await;
    }
    denied(&client, &format!("SELECT payload FROM {s}.messages")).await;
    // No row can be born claimed, retried, settled or dead, nor back-dated.
    let plain =
        "INSERT INTO {s}.messages (event_type, aggregate_type, aggregate_id, topic, payload";
    for (column, value) in [
        ("status", "'sent'"),
        ("status", "'dead'"),
        ("attempts", "5"),
        ("locked_by", "'me'"),
        ("locked_at", "now()"),
        ("next_run_at", "now() + interval '1 day'"),
        ("last_error", "'x'"),
        ("dead_at", "now()"),
        ("dead_reason", "'x'"),
        ("sent_at", "now()"),
        ("created_at", "now() - interval '1 day'"),
        ("id", "1000000"),
    ] {
        let sql = format!(
            "{}, {column}) VALUES ('e', 'a', '1', 't', '{{}}', {value})",
            plain.replace("{s}", &s)
        );
        denied(&client, &sql).await;
    }
    // Nor changed or removed afterwards.
    denied(&client, &format!("UPDATE {s}.messages SET attempts = 0")).await;
    denied(&client, &format!("DELETE FROM {s}.messages")).await;

    // What a producer does works: the library (both statements) ...
    let outbox = Outbox::with_schema(t.schema.clone());
    let msg = NewMessage::new("e", "a", "2", &serde_json::json!({"i": 2}))
        .unwrap()
        .header("tenant", "acme");
    let one = outbox.enqueue(&client, &msg).await.unwrap();
    let many = outbox
        .enqueue_many(&client, &[msg.clone(), msg.clone()])
        .await
        .unwrap();
    assert_eq!(many.len(), 2);
    // ... the documented plain SQL insert, with or without the optional columns ...
    client
        .batch_execute(&format!(
            "{}) VALUES ('e', 'a', '3', 't', '{{}}')",
            plain.replace("{s}", &s)
        ))
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "{}, headers, event_id, event_version) \
             VALUES ('e', 'a', '4', 't', '{{}}', '{{\"tenant\": \"acme\"}}', gen_random_uuid(), 2)",
            plain.replace("{s}", &s)
        ))
        .await
        .unwrap();
    // ... and the consumer inbox.
    let inbox = outbox::Inbox::with_schema(&t.schema);
    let first = inbox.record(&client, one.event_id, "t").await.unwrap();
    let again = inbox.record(&client, one.event_id, "t").await.unwrap();
    assert_ne!(first, again);
    // Every row it wrote starts pending, unclaimed, with no history.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE id > 1 AND status = 'pending' \
               AND attempts = 0 AND locked_by IS NULL AND locked_at IS NULL \
               AND dead_at IS NULL AND last_error IS NULL"
        )
        .await,
        5
    );

    // The relay still does its whole job under its role.
    let (ok, out, err) = outbox_as(&relay, t.name(), &["relay", "--once"]);
    assert!(ok, "{err}");
    assert_eq!(out, "claimed=5 published=5 marked_sent=5 failed=0\n");
    let (ok, out, err) = outbox_as(&relay, t.name(), &["stats"]);
    assert!(ok, "{err}");
    assert!(out.contains("sent"), "{out}");

    drop(client);
    t.exec(&format!(
        "DROP OWNED BY {producer}, {relay}; DROP ROLE {producer}; DROP ROLE {relay};"
    ))
    .await;
}

#[test]
fn grants_refuse_reserved_role_names_as_role_names() {
    for bad in [
        "public",
        "none",
        "current_user",
        "session_user",
        "current_role",
        "pg_monitor",
        "Relay",
        "a; drop table x",
    ] {
        for (producer, relay) in [(bad, "relay_ok"), ("producer_ok", bad)] {
            let (ok, out, err) = run(Command::new(env!("CARGO_BIN_EXE_outbox"))
                .env_remove("DATABASE_URL")
                .args(["grants", "--producer", producer, "--relay", relay]));
            assert!(!ok, "{bad}: {out}");
            assert!(
                err.contains(&format!("invalid role name {bad:?}")) && !err.contains("schema"),
                "{bad}: {err}"
            );
        }
    }
}

#[tokio::test]
async fn all_messages_shows_nothing_a_reader_may_not_read_in_its_tables() {
    let t = TestSchema::new("cli_grants_view").await;
    let client = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .map(|(c, conn)| {
            tokio::spawn(conn);
            c
        })
        .unwrap();
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap()
        .get(0);
    if version < 150000 {
        // security_invoker exists from PostgreSQL 15; before it, only the
        // grants keep the view closed.
        return;
    }
    let reader = format!("t_reader_{:08x}", rand::random::<u32>());
    t.exec(&format!(
        "CREATE ROLE {reader}; GRANT USAGE ON SCHEMA {{schema}} TO {reader}; \
         GRANT SELECT ON {{schema}}.all_messages TO {reader};"
    ))
    .await;
    let peek = format!(
        "BEGIN; SET LOCAL ROLE {reader}; SELECT payload FROM {}.all_messages; COMMIT;",
        t.schema.quoted()
    );
    let err = client.batch_execute(&peek).await.unwrap_err();
    client.batch_execute("ROLLBACK").await.unwrap();
    assert!(
        outbox::describe_tokio_postgres(&err).contains("permission denied"),
        "{err}"
    );
    t.exec(&format!("DROP OWNED BY {reader}; DROP ROLE {reader};"))
        .await;
}
