//! The archiver on the real PostgreSQL, one schema per test.

use outbox_relay::archive::{ArchiveService, ArchiveStats, Config, ServiceConfig};
use outbox_relay::{Archiver, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Fills a schema with `sent_old` sent rows two days old, 2 sent rows one
/// hour old, 2 dead rows two days old, and one pending, one processing and
/// one failed row, all created two days ago.
async fn fill(t: &TestSchema, sent_old: i64) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 1000000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 't', '{{}}', '{{}}', 1, now(), \
                now() - interval '3 days', \
                CASE WHEN i <= {sent_old} THEN now() - interval '2 days' \
                     ELSE now() - interval '1 hour' END \
           FROM generate_series(1, {sent_old} + 2) AS i;
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, \
           payload, status, attempts, locked_by, locked_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', 'p', 't', '{{}}', 'pending', 0, NULL, NULL, NULL, NULL, now() - interval '2 days'), \
                ('e', 'a', 'q', 't', '{{}}', 'processing', 1, 'r1', now() - interval '2 days', NULL, NULL, now() - interval '2 days'), \
                ('e', 'a', 'f', 't', '{{}}', 'failed', 3, NULL, NULL, NULL, NULL, now() - interval '2 days'), \
                ('e', 'a', 'd1', 't', '{{}}', 'dead', 10, NULL, NULL, now() - interval '2 days', 'x', now() - interval '2 days'), \
                ('e', 'a', 'd2', 't', '{{}}', 'dead', 10, NULL, NULL, now() - interval '2 days', 'x', now() - interval '2 days');"
    ))
    .await;
}

async fn unsent(t: &TestSchema) -> i64 {
    t.count(
        "SELECT count(*) FROM {schema}.messages WHERE status IN ('pending', 'processing', 'failed')",
    )
    .await
}

fn archiver(t: &TestSchema, config: Config) -> Archiver {
    Archiver::new(Store::new(t.pool.clone(), t.schema.clone()), config).unwrap()
}

#[tokio::test]
async fn moves_old_sent_rows_in_batches_and_leaves_unsent_alone() {
    let t = TestSchema::new("archive_move").await;
    fill(&t, 25).await;
    let a = archiver(
        &t,
        Config {
            older_than: DAY,
            batch_size: 10,
            ..Config::default()
        },
    );
    assert_eq!(
        a.eligible().await.unwrap(),
        ArchiveStats { sent: 25, dead: 0 }
    );
    let mut batches = Vec::new();
    let stats = a
        .run_once_with(None, |s| batches.push(s.sent))
        .await
        .unwrap();
    assert_eq!(stats, ArchiveStats { sent: 25, dead: 0 });
    assert_eq!(batches, [10, 20, 25]);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.archived_messages")
            .await,
        25
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages_sent").await,
        2
    );
    assert_eq!(unsent(&t).await, 3);
    // Dead rows stay without include_dead.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages WHERE status = 'dead'")
            .await,
        2
    );
    // all_messages no longer shows archived rows: 2 young sent + 3 unsent + 2 dead.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages").await,
        7
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages a \
               JOIN {schema}.archived_messages x USING (id)"
        )
        .await,
        0
    );
    // Archived rows keep their fields.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.archived_messages \
              WHERE status = 'sent' AND sent_at IS NOT NULL AND archived_at IS NOT NULL"
        )
        .await,
        25
    );
    // A second run finds nothing.
    assert_eq!(a.run_once().await.unwrap().total(), 0);
}

#[tokio::test]
async fn include_dead_moves_dead_rows_too() {
    let t = TestSchema::new("archive_dead").await;
    fill(&t, 3).await;
    let stats = archiver(
        &t,
        Config {
            older_than: DAY,
            include_dead: true,
            ..Config::default()
        },
    )
    .run_once()
    .await
    .unwrap();
    assert_eq!(stats, ArchiveStats { sent: 3, dead: 2 });
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.archived_messages WHERE status = 'dead'")
            .await,
        2
    );
    assert_eq!(unsent(&t).await, 3);
}

#[tokio::test]
async fn delete_removes_without_archiving() {
    let t = TestSchema::new("archive_delete").await;
    fill(&t, 7).await;
    let stats = archiver(
        &t,
        Config {
            older_than: DAY,
            batch_size: 3,
            delete: true,
            include_dead: true,
        },
    )
    .run_once()
    .await
    .unwrap();
    assert_eq!(stats, ArchiveStats { sent: 7, dead: 2 });
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.archived_messages")
            .await,
        0
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages_sent").await,
        2
    );
    assert_eq!(unsent(&t).await, 3);
}

#[tokio::test]
async fn config_is_validated() {
    let t = TestSchema::new("archive_cfg").await;
    let err = Archiver::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        Config {
            batch_size: 0,
            ..Config::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("batch size"), "{err}");
}

#[tokio::test]
async fn run_stops_on_shutdown() {
    let t = TestSchema::new("archive_run").await;
    fill(&t, 4).await;
    let service = ArchiveService::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        ServiceConfig {
            interval: Duration::from_secs(3600),
            ..ServiceConfig::after(DAY)
        },
    )
    .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = {
        let s = shutdown.clone();
        tokio::spawn(async move { service.run(&s).await })
    };
    // The first run happens at once; wait for its effect, not a timer.
    while t
        .count("SELECT count(*) FROM {schema}.archived_messages")
        .await
        < 4
    {
        tokio::task::yield_now().await;
    }
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(unsent(&t).await, 3);
}

#[tokio::test]
async fn two_archivers_at_once_take_each_row_once() {
    let t = TestSchema::new("archive_twice").await;
    fill(&t, 500).await;
    let config = Config {
        older_than: DAY,
        batch_size: 7,
        include_dead: true,
        ..Config::default()
    };
    let (a, b) = (archiver(&t, config.clone()), archiver(&t, config));
    let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.sent + rb.sent, 500);
    assert_eq!(ra.dead + rb.dead, 2);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.archived_messages")
            .await,
        502
    );
    assert_eq!(unsent(&t).await, 3);
}
