//! `outbox stats` on the real binary: counts equal the tables, per topic,
//! archived rows apart, and an exit code to alert on.

use crate::common;

use common::{fails, ok};
use outbox_testkit::TestSchema;

async fn stats_fixture(t: &TestSchema) {
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, locked_by, locked_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', '1', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now() - interval '2 hours'), \
                ('e', 'a', '2', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now()), \
                ('e', 'a', '3', 'orders', '{}', 'processing', 1, 'r', now(), NULL, NULL, now()), \
                ('e', 'a', '4', 'refunds', '{}', 'failed', 2, NULL, NULL, NULL, NULL, now()), \
                ('e', 'a', '5', 'refunds', '{}', 'dead', 9, NULL, NULL, now(), 'x', now()); \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 1000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 'orders', '{}', '{}', 1, \
                now(), now(), now() FROM generate_series(1, 4) AS i; \
         INSERT INTO {schema}.archived_messages (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, status, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 2000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 'refunds', '{}', '{}', \
                CASE WHEN i = 1 THEN 'dead' ELSE 'sent' END, 1, now(), now(), now() \
           FROM generate_series(1, 3) AS i;",
    )
    .await;
}

#[tokio::test]
async fn stats_json_counts_equal_the_tables() {
    let t = TestSchema::new("cli_stats").await;
    stats_fixture(&t).await;
    let v: serde_json::Value = serde_json::from_str(&ok(&t, &["stats", "--json"])).unwrap();
    for status in ["pending", "processing", "failed", "dead", "sent"] {
        let want = t
            .count(&format!(
                "SELECT count(*) FROM {{schema}}.all_messages WHERE status = '{status}'"
            ))
            .await;
        assert_eq!(v["counts"][status], want, "{status}: {v}");
    }
    for status in ["sent", "dead"] {
        let want = t
            .count(&format!(
                "SELECT count(*) FROM {{schema}}.archived_messages WHERE status = '{status}'"
            ))
            .await;
        assert_eq!(v["archived"][status], want, "archived {status}: {v}");
    }
    assert_eq!(v["dead"], 1);
    assert_eq!(v["topics"]["orders"]["counts"]["pending"], 2);
    assert_eq!(v["topics"]["orders"]["counts"]["sent"], 4);
    assert_eq!(v["topics"]["refunds"]["archived"]["sent"], 2);
    let age = v["oldest_pending_age_seconds"].as_f64().unwrap();
    assert!(age >= 7000.0, "{v}");

    let only: serde_json::Value =
        serde_json::from_str(&ok(&t, &["stats", "--json", "--topic", "refunds"])).unwrap();
    assert_eq!(only["counts"]["pending"], 0, "{only}");
    assert_eq!(only["counts"]["failed"], 1, "{only}");
    assert_eq!(only["archived"]["dead"], 1, "{only}");
    assert!(only["topics"].get("orders").is_none(), "{only}");

    let text = ok(&t, &["stats"]);
    assert!(text.contains("pending=2\n"), "{text}");
    assert!(text.contains("archived_sent=2\n"), "{text}");
    assert!(text.contains("topic \"orders\": pending=2"), "{text}");
}

#[tokio::test]
async fn stats_fails_when_the_oldest_pending_is_too_old() {
    let t = TestSchema::new("cli_stats_alert").await;
    stats_fixture(&t).await;
    ok(&t, &["stats", "--fail-if-oldest-pending-over", "3h"]);
    let err = fails(&t, &["stats", "--fail-if-oldest-pending-over", "1h"]);
    assert!(err.contains("oldest pending message is"), "{err}");
    assert!(err.contains("over the limit of 1h"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let err = fails(&t, &["stats", "--fail-if-oldest-pending-over", "soon"]);
    assert!(err.contains("--fail-if-oldest-pending-over"), "{err}");
}

/// Rows in states the relay never writes are counted under their status,
/// the oldest waiting one is found even with a `dead_at`, an infinite
/// `created_at` is an infinite age (not an error), and a 1 MiB topic prints
/// cut.
#[tokio::test]
async fn odd_rows_are_counted_and_long_topics_cut() {
    let t = TestSchema::new("cli_stats_odd").await;
    let big = "t".repeat(1 << 20);
    // States migration 10 refuses: rows written before it.
    t.exec(&format!(
        "ALTER TABLE {{schema}}.messages DROP CONSTRAINT messages_state_valid; \
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, next_run_at, dead_at, created_at, locked_by, locked_at) VALUES \
         ('e', 'a', '1', 'odd', '{{}}', 'pending', now(), now(), now() - interval '1 hour', NULL, NULL), \
         ('e', 'a', '2', 'odd', '{{}}', 'failed', 'infinity', NULL, now(), NULL, NULL), \
         ('e', 'a', '3', 'odd', '{{}}', 'processing', now(), NULL, now(), NULL, NULL), \
         ('e', 'a', '4', 'odd', '{{}}', 'dead', now(), NULL, now(), NULL, NULL), \
         ('e', 'a', '5', '{big}', '{{}}', 'pending', now(), NULL, now(), NULL, NULL)"
    ))
    .await;
    let out = ok(&t, &["stats"]);
    assert!(out.len() < 8 * 1024, "{} bytes", out.len());
    for want in [
        "pending=2",
        "failed=1",
        "processing=1",
        "dead=1",
        "bytes cut]",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    let age: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("oldest_pending_age_seconds="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        age >= 3600.0,
        "the pending row with a dead_at is the oldest: {age}"
    );

    let admin =
        outbox_relay::Admin::new(outbox_relay::Store::new(t.pool.clone(), t.schema.clone()));
    let b = admin.backlog().await.unwrap();
    assert_eq!(
        (b.pending, b.failed, b.processing, b.dead),
        (2, 1, 1, 1),
        "{b:?}"
    );

    // A producer's 'infinity' creation time: an age, not an error.
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           created_at) VALUES ('e', 'a', '6', 'inf', '{}', '-infinity')",
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ok(&t, &["stats", "--json"])).unwrap();
    assert_eq!(json["counts"]["pending"], 3, "{json}");
    assert!(json.to_string().len() < 8 * 1024);
}
