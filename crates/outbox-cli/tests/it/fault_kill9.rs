//! Kill -9 storm: the relay process is killed at random moments while
//! producers commit and roll back, then restarted. Nothing committed may be
//! lost, nothing rolled back published, every row must end sent, and
//! duplicates may come only from claims in flight at a kill.

use crate::common;

use common::net::Running;
use common::outbox;
use outbox_testkit::TestSchema;
use rand::Rng;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BATCH: i64 = 50;
/// Pipelines the relay runs (its default), each with a batch in flight.
const PIPELINES: i64 = 4;

/// With ordering on (the default), a relay restarted after `kill -9` gets
/// buckets of aggregates only once the killed one's registration expires:
/// a short bucket lease keeps the storm's relays claiming.
const BUCKET_LEASE: &str = "1s";

fn start_relay(schema: &str, id: &str) -> Running {
    outbox(
        schema,
        &[
            "relay",
            "--relay-id",
            id,
            "--bucket-lease",
            BUCKET_LEASE,
            "--batch-size",
            &BATCH.to_string(),
            "--concurrency",
            &PIPELINES.to_string(),
            "--lease",
            "1s",
            "--reap-interval",
            "250ms",
            "--poll-interval",
            "50ms",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map(Running)
    .expect("start relay")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_storm_loses_nothing_and_publishes_nothing_rolled_back() {
    let _solo = common::solo().await;
    let t = TestSchema::new("fault_kill9").await;
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let pool = t.pool.clone();
        let insert = format!(
            "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
             SELECT 'e', 'a', $1 || '-' || g, 'storm', '{{}}' FROM generate_series(1, $2::int4) g",
            t.schema.quoted()
        );
        let producing = producing.clone();
        tokio::spawn(async move {
            let mut client = pool.get().await.unwrap();
            let (mut committed, mut rolled_back, mut n) = (0i64, 0i64, 0u64);
            while producing.load(Ordering::Relaxed) {
                n += 1;
                let rows: i32 = rand::thread_rng().gen_range(1..=5);
                let commit = rand::thread_rng().gen_bool(0.7);
                let tag = format!("{}{n}", if commit { "c" } else { "r" });
                let tx = client.transaction().await.unwrap();
                tx.execute(&insert, &[&tag, &rows]).await.unwrap();
                if commit {
                    tx.commit().await.unwrap();
                    committed += i64::from(rows);
                } else {
                    tx.rollback().await.unwrap();
                    rolled_back += i64::from(rows);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            (committed, rolled_back)
        })
    };

    let mut kills = 0;
    let mut relay = start_relay(t.name(), "storm-0");
    while kills < 20 {
        // Kill only a relay that owns buckets (and so claims): one that
        // still waits for its killed predecessor's lease would be idle.
        let owns =
            format!("SELECT count(*) FROM {{schema}}.relay_buckets WHERE owner = 'storm-{kills}'");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while t.count(&owns).await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay storm-{kills} got no buckets"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let wait = rand::thread_rng().gen_range(100..700);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        relay.0.kill().expect("kill -9"); // SIGKILL: no shutdown handler runs
        relay.0.wait().unwrap();
        kills += 1;
        relay = start_relay(t.name(), &format!("storm-{kills}"));
    }
    producing.store(false, Ordering::Relaxed);
    let (committed, rolled_back) = producer.await.unwrap();

    // The last relay drains everything, recovering the killed claims once
    // their one-second lease expires.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await
        < committed
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();

    let rows = t.count("SELECT count(*) FROM {schema}.all_messages").await;
    let sent = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'sent'")
        .await;
    let published_distinct = t
        .count("SELECT count(DISTINCT message_id) FROM {schema}.published_events")
        .await;
    let published = t
        .count("SELECT count(*) FROM {schema}.published_events")
        .await;
    let lost = t
        .count(
            "SELECT count(*) FROM {schema}.all_messages m WHERE NOT EXISTS \
             (SELECT 1 FROM {schema}.published_events p WHERE p.message_id = m.id)",
        )
        .await;
    let rolled_back_published = t
        .count(
            "SELECT count(*) FROM {schema}.published_events p \
             WHERE NOT EXISTS (SELECT 1 FROM {schema}.all_messages m WHERE m.id = p.message_id)",
        )
        .await;
    let duplicates = published - published_distinct;
    eprintln!(
        "kill -9 storm: kills={kills} committed={committed} rolled_back={rolled_back} \
         lost={lost} rolled_back_published={rolled_back_published} duplicates={duplicates}"
    );
    assert!(
        committed > 0 && rolled_back > 0,
        "both kinds of transaction happened"
    );
    assert_eq!(rows, committed, "exactly the committed rows exist");
    assert_eq!(lost, 0, "nothing committed lost");
    assert_eq!(rolled_back_published, 0, "nothing rolled back published");
    assert_eq!(sent, committed, "every row ends sent");
    assert!(
        duplicates <= kills * BATCH * PIPELINES,
        "duplicates {duplicates} exceed the claims in flight at {kills} kills"
    );
}
