//! The binary refuses a schema from another build, claiming nothing, and
//! `outbox migrate` says what it did.

use crate::common;

use common::{fails, ok};
use outbox::sql::{latest_version, MIGRATIONS};
use outbox_testkit::TestSchema;

const INSERT: &str =
    "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                      VALUES ('e', 'a', '1', 't', '{}')";

/// Nothing claimed, attempted or published.
async fn untouched(t: &TestSchema) {
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND attempts = 0 AND locked_by IS NULL")
            .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        0
    );
}

#[tokio::test]
async fn an_older_schema_is_refused_until_migrated_and_migrate_names_what_it_applied() {
    let t = TestSchema::unmigrated("cli_schema_old").await;
    let latest = latest_version();
    assert!(ok(&t, &["migrate"]).contains(&format!(
        "applied {}",
        MIGRATIONS
            .iter()
            .map(|m| m.label())
            .collect::<Vec<_>>()
            .join(", ")
    )));
    // Back to migration 2, as a build of that time left it: no NOTIFY
    // trigger, no headers column in the sink.
    t.exec(
        "DELETE FROM {schema}.schema_migrations WHERE version > 2; \
         DROP TRIGGER messages_notify_relay ON {schema}.messages; \
         DROP FUNCTION {schema}.notify_relay(); \
         ALTER TABLE {schema}.published_events DROP COLUMN headers;",
    )
    .await;
    t.exec(INSERT).await;
    let err = fails(&t, &["relay", "--once"]);
    assert!(
        err.contains(&format!(
            "schema {} at migration 2, this binary needs {latest}: run `outbox migrate`",
            t.name()
        )),
        "{err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one clear sentence: {err}"
    );
    untouched(&t).await;
    for cmd in [
        &["stats"][..],
        &["dead", "list"],
        &["archive", "--older-than", "1d"],
    ] {
        let err = fails(&t, cmd);
        assert!(err.contains("at migration 2"), "{cmd:?}: {err}");
    }

    let after_2: Vec<String> = MIGRATIONS
        .iter()
        .filter(|m| m.version > 2)
        .map(|m| m.label())
        .collect();
    assert_eq!(
        ok(&t, &["migrate"]).trim_end(),
        format!("schema {}: applied {}", t.name(), after_2.join(", "))
    );
    assert_eq!(
        ok(&t, &["migrate"]).trim_end(),
        format!("schema {}: up to date (migration {latest})", t.name())
    );
    assert_eq!(
        ok(&t, &["relay", "--once"]).trim_end(),
        "claimed=1 published=1 marked_sent=1 failed=0"
    );
}

#[tokio::test]
async fn a_schema_with_a_newer_migration_recorded_is_refused() {
    let t = TestSchema::new("cli_schema_new").await;
    let (latest, newer) = (latest_version(), latest_version() + 1);
    t.exec(&format!(
        "INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ({newer}, 'from_the_future')"
    ))
    .await;
    t.exec(INSERT).await;
    let err = fails(&t, &["relay", "--once"]);
    assert!(
        err.contains(&format!(
            "schema {} at migration {newer} is newer than this binary ({latest}): upgrade outbox",
            t.name()
        )),
        "{err}"
    );
    untouched(&t).await;
    let err = fails(&t, &["stats"]);
    assert!(err.contains("upgrade outbox"), "{err}");
    let err = fails(&t, &["migrate"]);
    assert!(err.contains("upgrade outbox"), "{err}");
}

#[tokio::test]
async fn a_schema_missing_its_newest_record_is_refused() {
    let t = TestSchema::new("cli_schema_missing").await;
    let latest = latest_version();
    let previous = MIGRATIONS[MIGRATIONS.len() - 2].version;
    t.exec(&format!(
        "DELETE FROM {{schema}}.schema_migrations WHERE version = {latest}"
    ))
    .await;
    t.exec(INSERT).await;
    let err = fails(&t, &["relay", "--once"]);
    assert!(
        err.contains(&format!(
            "at migration {previous}, this binary needs {latest}: run `outbox migrate`"
        )),
        "{err}"
    );
    untouched(&t).await;
}
