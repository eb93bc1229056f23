//! `outbox archive` on the real binary and PostgreSQL.

use crate::common;

use common::{fails, ok};
use outbox_testkit::TestSchema;

/// `old` sent rows two days old, 2 sent rows an hour old, one old dead
/// row, and a pending, a processing and a failed row created long ago.
async fn fill(t: &TestSchema, old: i64) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 1000000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 't', '{{}}', '{{}}', 1, \
                now(), now() - interval '3 days', \
                CASE WHEN i <= {old} THEN now() - interval '2 days' \
                     ELSE now() - interval '1 hour' END \
           FROM generate_series(1, {old} + 2) AS i;
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, \
           payload, status, attempts, locked_by, locked_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', 'p', 't', '{{}}', 'pending', 0, NULL, NULL, NULL, NULL, now() - interval '9 days'), \
                ('e', 'a', 'q', 't', '{{}}', 'processing', 1, 'r1', now() - interval '9 days', NULL, NULL, now() - interval '9 days'), \
                ('e', 'a', 'f', 't', '{{}}', 'failed', 3, NULL, NULL, NULL, NULL, now() - interval '9 days'), \
                ('e', 'a', 'd', 't', '{{}}', 'dead', 10, NULL, NULL, now() - interval '2 days', 'x', now() - interval '9 days');"
    ))
    .await;
}

async fn count(t: &TestSchema, sql: &str) -> i64 {
    t.count(sql).await
}

const UNSENT: &str =
    "SELECT count(*) FROM {schema}.messages WHERE status IN ('pending', 'processing', 'failed')";

#[tokio::test]
async fn archives_in_batches_and_leaves_unsent_rows_alone() {
    let t = TestSchema::new("cli_archive").await;
    fill(&t, 5).await;
    let before = count(&t, "SELECT count(*) FROM {schema}.all_messages").await;
    let out = ok(&t, &["archive", "--older-than", "1d", "--batch-size", "2"]);
    // stdout is not a terminal here: no progress bar, just the result.
    assert_eq!(out, "archived=5\n");
    assert_eq!(
        count(&t, "SELECT count(*) FROM {schema}.archived_messages").await,
        5
    );
    assert_eq!(count(&t, UNSENT).await, 3);
    assert_eq!(
        count(
            &t,
            "SELECT count(*) FROM {schema}.messages WHERE status = 'dead'"
        )
        .await,
        1
    );
    // The view no longer shows archived rows.
    assert_eq!(
        count(&t, "SELECT count(*) FROM {schema}.all_messages").await,
        before - 5
    );
    assert_eq!(
        count(
            &t,
            "SELECT count(*) FROM {schema}.all_messages WHERE id IN \
               (SELECT id FROM {schema}.archived_messages)"
        )
        .await,
        0
    );
    // Nothing left to take.
    assert_eq!(ok(&t, &["archive", "--older-than", "1d"]), "archived=0\n");
}

#[tokio::test]
async fn include_dead_and_delete() {
    let t = TestSchema::new("cli_archive_del").await;
    fill(&t, 4).await;
    let out = ok(
        &t,
        &[
            "archive",
            "--older-than",
            "1d",
            "--delete",
            "--include-dead",
        ],
    );
    assert_eq!(out, "deleted=5\n");
    assert_eq!(
        count(&t, "SELECT count(*) FROM {schema}.archived_messages").await,
        0
    );
    assert_eq!(
        count(&t, "SELECT count(*) FROM {schema}.messages_sent").await,
        2
    );
    assert_eq!(
        count(
            &t,
            "SELECT count(*) FROM {schema}.messages WHERE status = 'dead'"
        )
        .await,
        0
    );
    assert_eq!(count(&t, UNSENT).await, 3);
}

#[tokio::test]
async fn include_dead_moves_dead_rows() {
    let t = TestSchema::new("cli_archive_dead").await;
    fill(&t, 1).await;
    let out = ok(&t, &["archive", "--older-than", "1d", "--include-dead"]);
    assert_eq!(out, "archived=2\n");
    assert_eq!(
        count(
            &t,
            "SELECT count(*) FROM {schema}.archived_messages WHERE status = 'dead'"
        )
        .await,
        1
    );
    assert_eq!(count(&t, UNSENT).await, 3);
}

#[tokio::test]
async fn bad_arguments_are_refused() {
    let t = TestSchema::new("cli_archive_bad").await;
    fill(&t, 2).await;
    let err = fails(&t, &["archive"]);
    assert!(err.contains("--older-than"), "{err}");
    let err = fails(&t, &["archive", "--older-than", "1d", "--batch-size", "0"]);
    assert!(err.contains("batch size"), "{err}");
    assert_eq!(
        count(&t, "SELECT count(*) FROM {schema}.messages_sent").await,
        4
    );
}
