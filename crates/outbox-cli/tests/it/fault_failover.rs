//! Failover to a synchronous standby: the primary dies (`-m immediate`)
//! while producers commit and the relay claims and publishes, the standby
//! is promoted, and the relay, given both hosts with
//! `target_session_attrs=read-write`, goes on from the new primary by
//! itself: every committed message delivered, in order per aggregate, the
//! process never exiting. And a relay pointed at a server in recovery says
//! so once and waits for it to accept writes, never writing to it.

use crate::common;

use common::net::{Running, Stderr};
use common::outbox_at as outbox;
use outbox_tempdb::Pair;
use outbox_testkit::order_check;
use outbox_testkit::webhook::Receiver;
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn relay(url: &str, publisher: &str, stderr: &Stderr) -> Running {
    outbox(
        url,
        &[
            "relay",
            "--relay-id",
            "r1",
            "--publisher",
            publisher,
            "--lease",
            "2s",
            "--bucket-lease",
            "2s",
            "--reap-interval",
            "500ms",
            "--poll-interval",
            "50ms",
            "--batch-size",
            "20",
        ],
    )
    .stdout(Stdio::null())
    .stderr(stderr.stdio())
    .spawn()
    .map(Running)
    .unwrap()
}

async fn connect(url: &str) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// The one number `sql` answers.
async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

const AGGREGATES: usize = 20;
const PRODUCERS: usize = 2;

/// What the producers know of their own transactions.
#[derive(Default)]
struct Produced {
    /// Commits the server acknowledged: each must be delivered.
    committed: Vec<String>,
    /// Those acknowledged after the promotion: sent from the new primary.
    after_promotion: Vec<String>,
    /// Commits whose answer was lost in the crash: committed or not, so
    /// delivered or not, but never anything else.
    in_doubt: Vec<String>,
}

/// Commits five messages per transaction, one aggregate after another,
/// through `url` until `stop`, reconnecting after an error. Producer `me`
/// has aggregates of its own: order is id order among committed rows, so
/// transactions of one aggregate must not overlap (a real producer locks
/// the aggregate's row).
async fn produce(
    me: usize,
    url: String,
    produced: Arc<Mutex<Produced>>,
    promoted: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    let insert =
        "INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                  SELECT 'e', 'order', $1::text, 't', '{}' FROM generate_series(1, 5) \
                  RETURNING event_id::text";
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let Some(mut client) = connect(&url).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let Ok(tx) = client.transaction().await else {
                break;
            };
            n += 1;
            let aggregate =
                (me * AGGREGATES / PRODUCERS + n % (AGGREGATES / PRODUCERS)).to_string();
            let ids: Vec<String> = match tx.query(insert, &[&aggregate]).await {
                Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                Err(_) => break,
            };
            let after = promoted.load(Ordering::Relaxed);
            let done = tx.commit().await;
            let ok = done.is_ok();
            {
                let mut p = produced.lock().unwrap();
                if !ok {
                    p.in_doubt.extend(ids);
                } else {
                    if after {
                        p.after_promotion.extend(ids.iter().cloned());
                    }
                    p.committed.extend(ids);
                }
            }
            if !ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn seen(rx: &Receiver) -> HashSet<String> {
    rx.received().into_iter().map(|r| r.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_follows_a_failover_to_the_promoted_standby() {
    let _solo = common::solo().await;
    let pair = Pair::start().expect("a primary and a synchronous standby for this test");
    let url = pair.url();
    let out = outbox(&url, &["migrate"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rx = Receiver::start().await;
    let stderr = Stderr::new();
    let mut relay = relay(&url, &rx.url, &stderr);

    let produced = Arc::new(Mutex::new(Produced::default()));
    let promoted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|me| {
            tokio::spawn(produce(
                me,
                url.clone(),
                produced.clone(),
                promoted.clone(),
                stop.clone(),
            ))
        })
        .collect();
    // Running at full speed, so claims are in flight when the primary dies.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rx.received().len() < 1000 {
        assert!(
            Instant::now() < deadline,
            "the relay is delivering: {}",
            stderr.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pair.primary.stop_server().unwrap();
    pair.promote().unwrap();
    promoted.store(true, Ordering::Relaxed);
    let promotion = Instant::now();
    // Claims the old primary granted and the crash left unsettled: the
    // leases the new primary must see through.
    let in_flight = pair
        .standby
        .psql("SELECT count(*) FROM outbox.all_messages WHERE status = 'processing'")
        .unwrap();
    assert_ne!(in_flight, "0", "claims are in flight when the primary dies");

    // The first delivery of a message committed on the new primary.
    let first = loop {
        let after = produced.lock().unwrap().after_promotion.clone();
        let got = seen(&rx);
        if after.iter().any(|id| got.contains(id)) {
            break promotion.elapsed();
        }
        assert!(
            promotion.elapsed() < Duration::from_secs(30),
            "nothing sent from the new primary: {}",
            stderr.text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!(
        "first delivery from the new primary {first:?} after the promotion; \
         {in_flight} messages were claimed at the crash"
    );
    // Within the retry pause and a new connection, on a busy 2-core machine.
    assert!(first < Duration::from_secs(5), "{first:?}");

    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.unwrap();
    }
    let produced = std::mem::take(&mut *produced.lock().unwrap());
    assert!(
        !produced.after_promotion.is_empty(),
        "producers went on against the new primary"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let missing = loop {
        let got = seen(&rx);
        let missing: Vec<&String> = produced
            .committed
            .iter()
            .filter(|id| !got.contains(*id))
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing.len();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay never exits: {}",
        stderr.text()
    );
    assert_eq!(
        missing,
        0,
        "every committed message is delivered: {}",
        stderr.text()
    );

    let known: HashSet<&String> = produced
        .committed
        .iter()
        .chain(&produced.in_doubt)
        .collect();
    let received = rx.received();
    for r in &received {
        assert!(
            known.contains(&r.id),
            "{} was never committed by a producer",
            r.id
        );
    }
    let report = order_check::check(&order_check::from_webhooks(&received));
    eprintln!(
        "committed {}, in doubt {}, delivered: {report}",
        produced.committed.len(),
        produced.in_doubt.len()
    );
    if !report.early.is_empty() {
        let client = connect(&url).await.expect("the new primary");
        for (agg, pred, id) in &report.early {
            for m in [*pred, *id] {
                let row = client
                    .query_one(
                        "SELECT event_id::text, status, created_at::text FROM outbox.all_messages WHERE id = $1",
                        &[&m],
                    )
                    .await
                    .unwrap();
                let ev: String = row.get(0);
                let at: Vec<usize> = received
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.id == ev)
                    .map(|(i, _)| i)
                    .collect();
                eprintln!(
                    "{agg:?} id {m}: {ev} {} {} delivered at {at:?} of {}; committed {} in doubt {} after promotion {}",
                    row.get::<_, String>(1),
                    row.get::<_, String>(2),
                    received.len(),
                    produced.committed.contains(&ev),
                    produced.in_doubt.contains(&ev),
                    produced.after_promotion.contains(&ev),
                );
            }
        }
    }
    assert!(
        report.out_of_order.is_empty() && report.early.is_empty(),
        "order per aggregate: {report}"
    );

    // Nothing is left claimed or pending on the new primary: the leases of
    // the old connections ran out and were taken again.
    let client = connect(&url).await.expect("the new primary");
    let left = count(
        &client,
        "SELECT count(*) FROM outbox.all_messages WHERE status <> 'sent'",
    )
    .await;
    assert_eq!(left, 0, "every message ends sent: {}", stderr.text());
    let total = count(&client, "SELECT count(*) FROM outbox.all_messages").await;
    assert!(total as usize >= produced.committed.len());
    assert!(total as usize <= produced.committed.len() + produced.in_doubt.len());
    assert!(received.len() >= AGGREGATES, "{}", received.len());
    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    assert!(relay.0.wait().unwrap().success(), "{}", stderr.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_a_standby_warns_once_and_starts_when_it_is_promoted() {
    let _solo = common::solo().await;
    let pair = Pair::start().expect("a primary and a synchronous standby for this test");
    let primary = pair.primary.url();
    let out = outbox(&primary, &["migrate"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = connect(&primary).await.unwrap();
    client
        .execute(
            "INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
             SELECT 'e', 'order', (g % 5)::text, 't', '{}' FROM generate_series(1, 50) g",
            &[],
        )
        .await
        .unwrap();
    drop(client);
    // Flushed on the standby at commit, applied a moment later.
    let standby = pair.standby.url();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pair
        .standby
        .psql("SELECT count(*) FROM outbox.messages")
        .ok()
        .as_deref()
        != Some("50")
    {
        assert!(Instant::now() < deadline, "the standby replays the primary");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The standby alone, as a URL that names the wrong server would.
    let rx = Receiver::start().await;
    let stderr = Stderr::new();
    let mut relay = relay(&standby, &rx.url, &stderr);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "no crash loop: {}",
        stderr.text()
    );
    assert!(
        rx.received().is_empty(),
        "nothing is published from a server that cannot settle it"
    );
    let log = stderr.text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && !l.contains("webhooks are sent unsigned"))
        .collect();
    assert_eq!(warnings.len(), 1, "one clear warning:\n{log}");
    assert!(
        warnings[0].contains("read-only") && warnings[0].contains("target_session_attrs"),
        "{}",
        warnings[0]
    );

    pair.primary.stop_server().unwrap();
    pair.promote().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(50)).await;
    assert!(got.is_ok(), "delivered once promoted: {}", stderr.text());
    // The webhook has them once they are published; their settle may
    // still be on its way: every row ends sent within a few seconds.
    let standby = connect(&standby).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = count(
            &standby,
            "SELECT count(*) FROM outbox.all_messages WHERE status <> 'sent'",
        )
        .await;
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} rows not sent 10 s after their delivery:\n{}",
            stderr.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(relay.0.try_wait().unwrap().is_none(), "{}", stderr.text());
}
