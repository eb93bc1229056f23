//! A schema created by an older build upgrades in place, keeping its rows.

use outbox::sql::MIGRATIONS;
use outbox_testkit::TestSchema;

/// The script that leaves a schema as a build knowing migrations 1 to
/// `version` did, records included.
fn schema_at(version: i32) -> String {
    let mut script = String::from(
        "CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL, \
           applied_at TIMESTAMPTZ NOT NULL DEFAULT now());",
    );
    for m in MIGRATIONS.iter().filter(|m| m.version <= version) {
        script.push_str(&format!(
            "DO $m$ BEGIN {} END $m$; \
             INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ({}, '{}');",
            m.sql, m.version, m.name
        ));
    }
    script
}

#[tokio::test]
async fn a_version_1_schema_upgrades_to_the_latest() {
    let t = TestSchema::unmigrated("upgrade_v1").await;
    // What a build that knew only migration 1 left behind.
    let v1 = MIGRATIONS[0].sql.replace("{schema}", &t.schema.quoted());
    t.exec(&format!(
        "CREATE SCHEMA {{schema}}; \
         CREATE TABLE {{schema}}.schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL, \
           applied_at TIMESTAMPTZ NOT NULL DEFAULT now()); \
         {v1}; \
         INSERT INTO {{schema}}.schema_migrations (version, name) VALUES (1, 'init'); \
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, dead_at, dead_reason) VALUES ('e', 'a', '1', 't', '{{}}', 'dead', now(), 'x');"
    ))
    .await;
    let client = t.pool.get().await.unwrap();
    outbox::migrate(&**client, &t.schema).await.unwrap();
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.schema_migrations")
            .await as usize,
        MIGRATIONS.len()
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages").await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.archived_messages")
            .await,
        0
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.dead_replays").await,
        0
    );
    // Migration 7 made `key_allowed`; nothing calls it since, and migration
    // 11 drops it: the schema holds only what runs.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM pg_proc WHERE proname = 'key_allowed' \
             AND pronamespace = '{schema}'::regnamespace"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_version_5_schema_with_bad_headers_upgrades_and_dead_letters_them_alone() {
    let t = TestSchema::unmigrated("upgrade_v5").await;
    // What a build that knew migrations 1 to 5 left behind, with rows that
    // break the header rule of migration 6 in every way, in every state.
    let script = schema_at(5);
    t.exec(&script).await;
    t.exec(
        "INSERT INTO {schema}.messages (aggregate_id, headers, status, attempts, locked_by, locked_at, \
           event_type, aggregate_type, topic, payload) VALUES \
           ('good', '{\"traceparent\": \"00-x\"}', 'pending', 0, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('good_failed', '{}', 'failed', 2, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('array', '[1, 2]', 'pending', 0, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('null', 'null', 'pending', 0, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('string', '\"x\"', 'failed', 1, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('number_value', '{\"n\": 1}', 'pending', 0, NULL, NULL, 'e', 'a', 't', '{}'), \
           ('source', '{\"source\": \"crm\"}', 'processing', 1, 'old-relay', now(), 'e', 'a', 't', '{}'), \
           ('ce_prefix', '{\"ce-type\": \"x\"}', 'pending', 0, NULL, NULL, 'e', 'a', 't', '{}'); \
         INSERT INTO {schema}.messages (aggregate_id, headers, status, dead_at, dead_reason, \
           event_type, aggregate_type, topic, payload) VALUES \
           ('already_dead', '{\"data\": \"x\"}', 'dead', now() - interval '1 day', 'earlier', 'e', 'a', 't', '{}'); \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, aggregate_type, \
           aggregate_id, topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
           VALUES (1000, gen_random_uuid(), 'e', 1, 'a', 'sent', 't', '{}', '{\"id\": \"x\"}', 1, now(), now(), now());",
    )
    .await;

    let client = t.pool.get().await.unwrap();
    outbox::migrate(&**client, &t.schema).await.unwrap();
    assert_eq!(
        t.count("SELECT max(version)::int8 FROM {schema}.schema_migrations")
            .await,
        i64::from(outbox::sql::latest_version())
    );
    // Nothing lost; the good rows untouched; each bad row dead alone, with
    // a reason; history (dead or sent before) as it was.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages").await,
        10
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE aggregate_id LIKE 'good%' \
               AND dead_at IS NULL AND status IN ('pending', 'failed')"
        )
        .await,
        2
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'dead' AND dead_at IS NOT NULL \
               AND locked_by IS NULL AND dead_reason LIKE 'headers refused by migration 6%'"
        )
        .await,
        6
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.messages WHERE aggregate_id = 'already_dead' \
               AND dead_reason = 'earlier'"
        )
        .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages_sent WHERE headers = '{\"id\": \"x\"}'")
            .await,
        1
    );
    // The constraint is validated, and new bad rows are refused.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM pg_constraint WHERE conname = 'messages_headers_valid' \
               AND convalidated AND conrelid = '{schema}.messages'::regclass"
        )
        .await,
        1
    );
    let bad = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers) \
         VALUES ('e', 'a', '1', 't', '{{}}', '[]')",
        t.schema.quoted()
    );
    assert!(client.batch_execute(&bad).await.is_err());
    // A dead-lettered row comes back once its headers are fixed; not before.
    let replay = format!(
        "UPDATE {}.messages SET status = 'pending', dead_at = NULL WHERE aggregate_id = 'source'",
        t.schema.quoted()
    );
    assert!(client.batch_execute(&replay).await.is_err());
    t.exec("UPDATE {schema}.messages SET headers = '{\"origin\": \"crm\"}' WHERE aggregate_id = 'source'")
        .await;
    client.batch_execute(&replay).await.unwrap();
    // Migrating again changes nothing.
    outbox::migrate(&**client, &t.schema).await.unwrap();
}

#[tokio::test]
async fn a_version_7_sink_gains_the_envelope_columns_and_keeps_its_rows() {
    let t = TestSchema::unmigrated("upgrade_v7_sink").await;
    // What a build that knew migrations 1 to 7 left behind, with one row
    // already published to the sink.
    let mut script = schema_at(7);
    script.push_str(
        "INSERT INTO {schema}.published_events (message_id, event_id, topic, payload, publisher) \
           VALUES (1, gen_random_uuid(), 'orders', '{}', 'old-relay');",
    );
    t.exec(&script).await;
    let client = t.pool.get().await.unwrap();
    outbox::migrate(&**client, &t.schema).await.unwrap();
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.published_events \
              WHERE publisher = 'old-relay' AND headers = '{}' AND event_type IS NULL \
                AND event_version IS NULL AND aggregate_type IS NULL \
                AND aggregate_id IS NULL AND enqueued_at IS NULL"
        )
        .await,
        1
    );
}

/// Rows in states the relay never writes, left by a build before migration
/// 10: each goes dead alone with the reason, the rest are untouched, and
/// the CHECK then refuses new ones.
#[tokio::test]
async fn a_version_9_schema_with_rows_in_impossible_states_dead_letters_them_alone() {
    let t = TestSchema::unmigrated("upgrade_v9").await;
    let script = schema_at(9);
    t.exec(&script).await;
    t.exec(
        "INSERT INTO {schema}.messages (aggregate_id, status, attempts, locked_by, locked_at, dead_at, \
           next_run_at, created_at, event_type, aggregate_type, topic, payload) VALUES \
           ('good', 'pending', 0, NULL, NULL, NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('good_claimed', 'processing', 1, 'r', now(), NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('good_dead', 'dead', 3, NULL, NULL, now(), 'infinity', 'infinity', 'e', 'a', 't', '{}'), \
           ('no_lease', 'processing', 1, NULL, NULL, NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('pending_dead_at', 'pending', 0, NULL, NULL, now(), now(), now(), 'e', 'a', 't', '{}'), \
           ('dead_no_dead_at', 'dead', 0, NULL, NULL, NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('sent_in_hot', 'sent', 1, NULL, NULL, NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('leased_pending', 'pending', 0, 'r', now(), NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('negative', 'failed', -5, NULL, NULL, NULL, now(), now(), 'e', 'a', 't', '{}'), \
           ('never_due', 'pending', 0, NULL, NULL, NULL, 'infinity', now(), 'e', 'a', 't', '{}'), \
           ('infinite_created', 'pending', 0, NULL, NULL, NULL, now(), 'infinity', 'e', 'a', 't', '{}'), \
           ('far_created', 'pending', 0, NULL, NULL, NULL, now(), '290000-01-01', 'e', 'a', 't', '{}');",
    )
    .await;
    let client = t.pool.get().await.unwrap();
    outbox::migrate(&**client, &t.schema).await.unwrap();
    let rows = client
        .query(
            &format!(
                "SELECT aggregate_id, status, dead_at IS NOT NULL, locked_by IS NULL, dead_reason \
                   FROM {}.messages ORDER BY id",
                t.schema.quoted()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 12);
    for r in &rows {
        let (id, status, dead, unlocked, reason): (String, String, bool, bool, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        if id.starts_with("good") {
            assert!(reason.is_none(), "{id} untouched: {reason:?}");
            continue;
        }
        assert_eq!(
            (status.as_str(), dead, unlocked),
            ("dead", true, true),
            "{id}"
        );
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("refused by migration 10: ")
                && reason.ends_with("; fix the row, then replay"),
            "{id}: {reason}"
        );
    }
    // The constraint is validated; a new row in such a state is refused.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM pg_constraint WHERE conname = 'messages_state_valid' \
               AND convalidated AND conrelid = '{schema}.messages'::regclass"
        )
        .await,
        1
    );
    let bad = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status) \
         VALUES ('e', 'a', '1', 't', '{{}}', 'processing')",
        t.schema.quoted()
    );
    assert!(client.batch_execute(&bad).await.is_err());
    // Migrating again changes nothing.
    outbox::migrate(&**client, &t.schema).await.unwrap();
}
