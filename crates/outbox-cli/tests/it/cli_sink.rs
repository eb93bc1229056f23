//! The PostgreSQL sink in a database of its own, through the binary: poison
//! rows go dead while the rest flow and come back with a replay; an outage
//! of the sink longer than the retry schedule dead-letters nothing.

use crate::common;

use common::net::Running;
use common::{ok, outbox};
use outbox_testkit::{TestDatabase, TestSchema};
use std::process::Stdio;
use std::time::Duration;

async fn enqueue(t: &TestSchema, n: i64, topic: &str) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', g::text, '{topic}', jsonb_build_object('i', g) FROM generate_series(1, {n}) g"
    ))
    .await;
}

async fn sink_query(sink: &TestDatabase, sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&sink.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client.query_one(sql, &[]).await.unwrap().get(0)
}

async fn sink_count(sink: &TestDatabase, schema: &str, filter: &str) -> i64 {
    sink_query(
        sink,
        &format!("SELECT count(*) FROM \"{schema}\".published_events WHERE {filter}"),
    )
    .await
}

#[tokio::test]
async fn poison_goes_dead_in_a_sink_database_and_replay_sends_it_once_fixed() {
    let t = TestSchema::new("cli_sink_poison").await;
    let sink = TestDatabase::new("cli_sink_poison_db").await;
    let publisher = sink.url();
    // First pass creates the sink table in the sink database.
    assert_eq!(
        ok(&t, &["relay", "--once", "--publisher", &publisher]),
        "claimed=0 published=0 marked_sent=0 failed=0\n"
    );
    let (client, conn) = tokio_postgres::connect(&sink.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE FUNCTION public.reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.topic = 'poison' THEN \
               RAISE EXCEPTION 'poison refused by the sink' USING ERRCODE = 'check_violation'; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER reject_poison BEFORE INSERT ON \"{s}\".published_events \
               FOR EACH ROW EXECUTE FUNCTION public.reject_poison();",
            s = t.name()
        ))
        .await
        .unwrap();
    enqueue(&t, 5, "orders").await;
    enqueue(&t, 2, "poison").await;
    enqueue(&t, 5, "orders").await;
    assert_eq!(
        ok(&t, &["relay", "--once", "--publisher", &publisher]),
        "claimed=12 published=10 marked_sent=10 failed=2\n"
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE topic = 'poison' AND status = 'dead' \
                 AND dead_reason LIKE '%poison refused by the sink%'"
        )
        .await,
        2
    );
    assert_eq!(sink_count(&sink, t.name(), "topic = 'orders'").await, 10);

    assert_eq!(
        ok(&t, &["dead", "replay", "--topic", "poison"]),
        "replayed=2\n"
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE topic = 'poison' AND status = 'pending'"
        )
        .await,
        2
    );
    client
        .batch_execute(&format!(
            "DROP TRIGGER reject_poison ON \"{}\".published_events",
            t.name()
        ))
        .await
        .unwrap();
    assert_eq!(
        ok(&t, &["relay", "--once", "--publisher", &publisher]),
        "claimed=2 published=2 marked_sent=2 failed=0\n"
    );
    assert_eq!(sink_count(&sink, t.name(), "topic = 'poison'").await, 2);
}

/// The issue's own check: `--max-attempts 3 --backoff 1s`, the sink refusing
/// connections for 20 s while 500 messages are enqueued: 0 dead, 500 sent.
#[tokio::test]
async fn a_twenty_second_sink_outage_dead_letters_nothing() {
    let t = TestSchema::new("cli_sink_outage").await;
    let sink = TestDatabase::new("cli_sink_outage_db").await;
    let mut relay = outbox(
        t.name(),
        &[
            "relay",
            "--publisher",
            &sink.url(),
            "--max-attempts",
            "3",
            "--backoff",
            "1s",
            "--poll-interval",
            "200ms",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .map(Running)
    .unwrap();
    // Wait until the relay has created the sink table: it is up.
    let table_exists = format!(
        "SELECT count(*) FROM pg_tables WHERE schemaname = '{}' AND tablename = 'published_events'",
        t.name()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sink_query(&sink, &table_exists).await == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sink.refuse_connections().await;
    for _ in 0..5 {
        enqueue(&t, 100, "orders").await;
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    let dead_during = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
        .await;
    let sent_during = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await;
    sink.accept_connections().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await
        < 500
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGTERM: a clean exit with status 0.
    let pid = relay.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = relay.0.wait().unwrap();
    assert_eq!(
        (dead_during, sent_during),
        (0, 0),
        "nothing dead or sent while the sink was down"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await,
        500
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        0
    );
    assert_eq!(sink_count(&sink, t.name(), "true").await, 500);
    assert!(status.success(), "relay exit status {status:?}");
}
