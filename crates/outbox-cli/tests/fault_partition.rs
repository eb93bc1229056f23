//! A network partition between the relay and its database: packets
//! dropped, nothing closed or reset (the test proxy's partition mode; the
//! connections open when it began stay open and dead, as when a link or a
//! NAT loses its state). The relay, its LISTEN connection included, must
//! not hang on them: every database call has a deadline (`db_timeout`,
//! 10 s by default), past which its connection is dropped, so once the
//! network heals the relay delivers again by itself, within that bound.

mod common;

use common::net::Running;
use common::outbox;
use outbox_testkit::{database_url, FaultyProxy, TestSchema};
use std::process::{Command, Stdio};
use std::time::Duration;

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

const SENT: &str = "SELECT count(*) FROM {schema}.messages_sent";

async fn wait_sent(t: &TestSchema, want: i64, within: Duration) -> i64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let sent = t.count(SENT).await;
        if sent >= want || tokio::time::Instant::now() > deadline {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_comes_back_by_itself_after_a_partition_heals() {
    let t = TestSchema::new("fault_partition").await;
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let proxy = FaultyProxy::start(([127, 0, 0, 1], port).into()).await;
    let log = tempfile::NamedTempFile::new().unwrap();
    // The defaults, but a short lease: a claim whose answer the partition
    // swallowed is recovered when its lease ends, and the test should not
    // wait the default five minutes for that.
    let mut relay = outbox(
        t.name(),
        &["relay", "--lease", "5s", "--reap-interval", "1s"],
    )
    .env("DATABASE_URL", via(proxy.addr().port()))
    .stdout(Stdio::null())
    .stderr(log.reopen().unwrap())
    .spawn()
    .map(Running)
    .unwrap();

    enqueue(&t, 200).await;
    assert_eq!(wait_sent(&t, 200, Duration::from_secs(60)).await, 200);

    // Batches in flight when the network goes: enqueued just before.
    enqueue(&t, 2000).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    proxy.partition();
    enqueue(&t, 300).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay must not exit during a partition"
    );
    let before = t.count(SENT).await;
    proxy.heal();
    let healed = tokio::time::Instant::now();
    let first = wait_sent(&t, before + 1, Duration::from_secs(60)).await;
    let resumed = healed.elapsed();
    let all = wait_sent(&t, 2500, Duration::from_secs(90)).await;
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    eprintln!("delivered again {resumed:?} after the network healed");
    assert!(first > before, "delivers again after the heal:\n{stderr}");
    // Calls stuck on the dead connections end at their deadline, 10 s
    // after they began (before the heal); then one retry pause (0.5 s).
    // The slack is for a busy 2-core machine.
    assert!(
        resumed < Duration::from_secs(13),
        "delivered again {resumed:?} after the heal:\n{stderr}"
    );
    assert_eq!(all, 2500, "every committed message ends sent:\n{stderr}");
    assert!(
        stderr.contains("did not answer within"),
        "the deadline is what brought it back:\n{stderr}"
    );
    assert!(relay.0.try_wait().unwrap().is_none(), "still running");
    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    let status = relay.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let distinct = t
        .count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
        .await;
    assert_eq!(distinct, 2500);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        0,
        "a partition must not dead-letter messages"
    );
}
