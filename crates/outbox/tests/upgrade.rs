//! A schema created by an older build upgrades in place, keeping its rows.

use outbox::sql::MIGRATIONS;
use outbox_testkit::TestSchema;

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
}
