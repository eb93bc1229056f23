//! A slow, then flapping, network between the relay and its database (a TCP
//! proxy that delays every chunk, cuts every connection again and again, and
//! for a while refuses new ones): the relay keeps going by itself and every
//! committed message ends sent, none dead.

use crate::common;

use common::net::Running;
use common::outbox;
use outbox_testkit::{database_url, FaultyProxy, TestSchema};
use std::process::{Command, Stdio};
use std::time::Duration;

const BATCH: i64 = 50;
/// Pipelines the relay runs (its default), each with a batch in flight.
const PIPELINES: i64 = 4;

/// The test database's connection string, through `port` on loopback.
fn via(port: u16) -> String {
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    format!(
        "host=127.0.0.1 port={port} dbname={} user={}",
        cfg.get_dbname().unwrap_or("postgres"),
        cfg.get_user().unwrap_or("postgres")
    )
}

async fn enqueue(t: &TestSchema, n: i64) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', g::text, 't', '{{}}' FROM generate_series(1, {n}) g"
    ))
    .await;
}

async fn wait_sent(t: &TestSchema, want: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let sent = t
            .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
            .await;
        if sent >= want || tokio::time::Instant::now() > deadline {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_then_flapping_database_link() {
    let _solo = common::solo().await;
    let t = TestSchema::new("fault_network").await;
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let proxy = FaultyProxy::start(([127, 0, 0, 1], port).into()).await;
    let mut relay = outbox(
        t.name(),
        &[
            "relay",
            "--batch-size",
            &BATCH.to_string(),
            "--concurrency",
            &PIPELINES.to_string(),
            "--lease",
            "2s",
            "--reap-interval",
            "500ms",
            "--poll-interval",
            "100ms",
        ],
    )
    .env("DATABASE_URL", via(proxy.addr().port()))
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map(Running)
    .unwrap();

    // Slow: 20 ms on every chunk each way.
    proxy.set_delay(Duration::from_millis(20));
    enqueue(&t, 300).await;
    assert_eq!(wait_sent(&t, 300).await, 300, "a slow link still delivers");

    // Flapping: every connection cut every 300 ms for 6 s, with a second of
    // refused connections in the middle; producers keep committing.
    proxy.set_delay(Duration::from_millis(2));
    let mut cuts = 0;
    for round in 0..20 {
        if round % 4 == 0 {
            enqueue(&t, 75).await;
        }
        proxy.refuse((8..11).contains(&round));
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.cut_all();
        cuts += 1;
    }
    proxy.refuse(false);
    let sent = wait_sent(&t, 675).await;
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay must not exit on a flapping link"
    );
    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    let status = relay.0.wait().unwrap();

    let published = t
        .count("SELECT count(*) FROM {schema}.published_events")
        .await;
    let distinct = t
        .count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
        .await;
    let dead = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
        .await;
    eprintln!(
        "flapping link: cuts={cuts} sent={sent} duplicates={} dead={dead}",
        published - distinct
    );
    assert_eq!(sent, 675, "every committed message ends sent");
    assert_eq!(distinct, 675);
    assert_eq!(dead, 0, "a bad network must not dead-letter messages");
    assert!(
        published - distinct <= cuts * BATCH * PIPELINES,
        "duplicates bounded by claims in flight at the cuts"
    );
    assert!(status.success(), "{status:?}");
}
