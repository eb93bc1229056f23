//! A network partition between the relay and its database: packets
//! dropped, nothing closed or reset. Twice: by the test proxy's partition
//! mode (the connections open when it began stay open and dead, as when a
//! NAT loses its state, and the proxy's kernel still answers keepalives),
//! and by the kernel, the relay running in a network namespace whose link
//! goes down (its retransmissions go unanswered, its new connections time
//! out). The relay, its LISTEN connection included, must not hang on them:
//! every database call has a deadline (`db_timeout`, 10 s by default), past
//! which its connection is dropped, so once the network heals the relay
//! delivers again by itself, within that bound.

use crate::common;

use common::net::Running;
use common::outbox;
use outbox_testkit::netns::Netns;
use outbox_testkit::{database_url, FaultyProxy, TestSchema};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The test database's connection string, through `addr`.
fn via(addr: std::net::SocketAddr) -> String {
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    format!(
        "host={} port={} dbname={} user={}",
        addr.ip(),
        addr.port(),
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

const SENT: &str = "SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'";

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

/// Where the test database listens.
fn database_addr() -> std::net::SocketAddr {
    let cfg: tokio_postgres::Config = database_url().parse().unwrap();
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    ([127, 0, 0, 1], port).into()
}

/// The defaults, but a short lease: a claim whose answer the partition
/// swallowed is recovered when its lease ends, and the test should not
/// wait the default five minutes for that.
const RELAY: &[&str] = &["relay", "--lease", "5s", "--reap-interval", "1s"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_comes_back_by_itself_after_a_partition_heals() {
    let _solo = common::solo().await;
    let t = TestSchema::new("fault_partition").await;
    let proxy = FaultyProxy::start(database_addr()).await;
    let relay = outbox(t.name(), RELAY);
    let stderr = partition_and_heal(
        &t,
        relay,
        proxy.addr(),
        || proxy.partition(),
        || proxy.heal(),
    )
    .await;
    // The proxy's end answers keepalives: only the deadline ends the
    // calls on its dead connections.
    assert!(
        stderr.contains("did not answer within"),
        "the deadline is what brought it back:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_comes_back_by_itself_after_its_network_namespace_is_cut_off() {
    let _solo = common::solo().await;
    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(e) if !am_root() => {
            eprintln!("skipped: a network namespace needs root ({e})");
            return;
        }
        Err(e) => panic!("cannot make a network namespace: {e}"),
    };
    let t = TestSchema::new("fault_netns").await;
    // The relay's only way to the database: over the link, to a plain
    // forwarder on this side (never partitioned itself).
    let proxy = FaultyProxy::start_on((ns.host_addr, 0).into(), database_addr()).await;
    let mut relay = ns.command(common::binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOX_") {
            relay.env_remove(k);
        }
    }
    relay
        .env_remove("RUST_LOG")
        .args(["--schema", t.name()])
        .args(RELAY);
    // Shorter than TCP's retransmission timeout: the kernel's own
    // retransmissions carry the open connections over the heal, or the
    // deadline replaces them; either way within the bound.
    partition_and_heal(&t, relay, proxy.addr(), || ns.partition(), || ns.heal()).await;
}

fn am_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `relay` against the test schema through `addr`, partitions the
/// network with batches in flight for 4 s, heals it, and checks that the
/// relay delivered again by itself within the deadline's bound and that
/// every message ends sent, once, none dead.
async fn partition_and_heal(
    t: &TestSchema,
    mut relay: Command,
    addr: std::net::SocketAddr,
    partition: impl Fn(),
    heal: impl Fn(),
) -> String {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut relay = relay
        .env("DATABASE_URL", via(addr))
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .map(Running)
        .unwrap();

    enqueue(t, 200).await;
    let stderr = || std::fs::read_to_string(log.path()).unwrap_or_default();
    assert_eq!(
        wait_sent(t, 200, Duration::from_secs(60)).await,
        200,
        "{}",
        stderr()
    );

    // Batches in flight when the network goes: enqueued just before.
    enqueue(t, 2000).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    partition();
    enqueue(t, 300).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut_off = t.count(SENT).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay must not exit during a partition"
    );
    let before = t.count(SENT).await;
    assert_eq!(before, cut_off, "nothing is settled through a partition");
    assert!(before < 2500, "the partition came with work in flight");
    heal();
    let healed = tokio::time::Instant::now();
    let first = wait_sent(t, before + 1, Duration::from_secs(60)).await;
    let resumed = healed.elapsed();
    let all = wait_sent(t, 2500, Duration::from_secs(90)).await;
    let stderr = stderr();
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
    stderr
}
