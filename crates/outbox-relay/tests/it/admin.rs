//! The admin API ([`outbox_relay::Admin`]) as another crate calls it, on
//! the real PostgreSQL: each read against rows written by hand, so a
//! statement that counts, groups or ages wrongly fails here, whatever the
//! CLI and the page make of it.

use outbox_relay::admin::{get, Timestamp};
use outbox_relay::{Admin, DeadLetters, Error, ReplayTarget, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;

fn admin(t: &TestSchema) -> Admin {
    Admin::new(Store::new(t.pool.clone(), t.schema.clone()))
}

/// Two topics in every status, two sent rows, archived rows of both kinds,
/// and a `pending` row with a `dead_at` (written before migration 10's
/// CHECK): never claimable, so waiting forever. Of each kind, the oldest
/// row is the first by id, as producers write them: the ages are read by
/// id, from an index.
async fn fixture(t: &TestSchema) {
    t.exec(
        "ALTER TABLE {schema}.messages DROP CONSTRAINT messages_state_valid; \
         INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, locked_by, locked_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', '0', 'stuck', '{}', 'pending', 0, NULL, NULL, now(), NULL, now() - interval '5 hours'), \
                ('e', 'a', '1', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now() - interval '2 hours'), \
                ('e', 'a', '2', 'orders', '{}', 'pending', 0, NULL, NULL, NULL, NULL, now()), \
                ('e', 'a', '3', 'orders', '{}', 'processing', 1, 'r1', now() - interval '5 s', NULL, NULL, now()), \
                ('e', 'a', '4', 'orders', '{}', 'processing', 1, 'r1', now() - interval '1 s', NULL, NULL, now()), \
                ('e', 'a', '5', 'orders', '{}', 'processing', 1, 'r2', now(), NULL, NULL, now()), \
                ('e', 'a', '6', 'refunds', '{}', 'failed', 2, NULL, NULL, NULL, NULL, now() - interval '30 minutes'), \
                ('e', 'a', '7', 'refunds', '{}', 'dead', 9, NULL, NULL, now(), 'gone', now()); \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, \
           created_at, sent_at) \
         SELECT 1000 + i, gen_random_uuid(), 'e', 1, 'a', i::text, 'orders', '{}', '{}', 1, \
                now(), now(), now() FROM generate_series(1, 2) AS i; \
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
async fn counts_and_ages_match_the_rows() {
    let t = TestSchema::new("admin_counts").await;
    fixture(&t).await;
    let a = admin(&t);

    let b = a.backlog().await.unwrap();
    assert_eq!(
        (b.pending, b.processing, b.failed, b.dead),
        (3, 3, 1, 1),
        "{b:?}"
    );

    let all = a.count_by_topic(None).await.unwrap();
    let n = |topic: &str, status: &str| all[topic].get(status).copied().unwrap_or(0);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!((n("orders", "pending"), n("orders", "processing")), (2, 3));
    assert_eq!(n("orders", "sent"), 2, "sent rows counted: {all:?}");
    assert_eq!((n("refunds", "failed"), n("refunds", "dead")), (1, 1));
    assert_eq!(
        (n("refunds", "archived_sent"), n("refunds", "archived_dead")),
        (2, 1),
        "archived rows counted: {all:?}"
    );
    let refunds = a.count_by_topic(Some("refunds")).await.unwrap();
    assert_eq!(refunds.keys().collect::<Vec<_>>(), ["refunds"]);
    assert_eq!(refunds["refunds"], all["refunds"]);

    // The oldest waiting row is the stuck one (5 h); the oldest claimable
    // one is 2 h old; of `refunds`, the failed row (30 min).
    let hours = |d: Option<Duration>| d.unwrap().as_secs_f64() / 3600.0;
    let waiting = hours(a.oldest_waiting_age(None).await.unwrap());
    assert!((4.9..5.1).contains(&waiting), "{waiting} h");
    let claimable = hours(a.oldest_claimable_age(None).await.unwrap());
    assert!((1.9..2.1).contains(&claimable), "{claimable} h");
    let of_refunds = hours(a.oldest_waiting_age(Some("refunds")).await.unwrap());
    assert!((0.45..0.55).contains(&of_refunds), "{of_refunds} h");
    assert_eq!(a.oldest_waiting_age(Some("none")).await.unwrap(), None);
    assert_eq!(a.oldest_claimable_age(Some("stuck")).await.unwrap(), None);
}

#[tokio::test]
async fn the_page_snapshot_reads_groups_relays_and_replays() {
    let t = TestSchema::new("admin_page").await;
    fixture(&t).await;
    let a = admin(&t);

    let mut hot = a.hot_counts().await.unwrap();
    hot.sort_by(|x, y| (&x.topic, &x.status, &x.relay).cmp(&(&y.topic, &y.status, &y.relay)));
    let groups: Vec<(&str, &str, Option<&str>, i64)> = hot
        .iter()
        .map(|h| {
            (
                h.topic.as_str(),
                h.status.as_str(),
                h.relay.as_deref(),
                h.count,
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("orders", "pending", None, 2),
            ("orders", "processing", Some("r1"), 2),
            ("orders", "processing", Some("r2"), 1),
            ("refunds", "dead", None, 1),
            ("refunds", "failed", None, 1),
            ("stuck", "pending", None, 1),
        ]
    );
    let r1 = hot
        .iter()
        .find(|h| h.relay.as_deref() == Some("r1"))
        .unwrap();
    let r2 = hot
        .iter()
        .find(|h| h.relay.as_deref() == Some("r2"))
        .unwrap();
    assert!(
        r1.last_claim.unwrap() < r2.last_claim.unwrap(),
        "the newest claim of each relay: {r1:?} {r2:?}"
    );
    assert!(hot
        .iter()
        .filter(|h| h.status != "processing")
        .all(|h| h.last_claim.is_none()));

    // The collector's counters of the sent table, once the inserts reach
    // them (lazily: each pooled connection is made to flush its own).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let sent = loop {
        let c = a.sent_counters().await.unwrap();
        if c.inserted == Some(2) || std::time::Instant::now() > deadline {
            break c;
        }
        t.exec("SELECT pg_stat_force_next_flush()").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((sent.inserted, sent.estimate), (Some(2), 2), "{sent:?}");

    assert!(a.relays().await.unwrap().is_empty());
    t.exec(
        "INSERT INTO {schema}.relays (relay_id, token, ordering, lease_until) \
         VALUES ('b', 2, 'aggregate', 'infinity'), ('a', 1, 'aggregate', now() + interval '30 s')",
    )
    .await;
    let relays = a.relays().await.unwrap();
    let ids: Vec<&str> = relays.iter().map(|r| r.relay_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "in relay id order");
    assert_eq!(relays[0].ordering, "aggregate");
    assert!(relays[0].lease_until > relays[0].started_at);
    assert_eq!(
        relays[1].lease_until,
        Timestamp::Infinity,
        "a stored infinity is shown as such"
    );

    assert!(a.recent_replays(10).await.unwrap().is_empty());
    let dead = t
        .count("SELECT id FROM {schema}.messages WHERE status = 'dead'")
        .await;
    DeadLetters::new(Store::new(t.pool.clone(), t.schema.clone()))
        .replay(&ReplayTarget::Ids(vec![dead]), Some("ops"))
        .await
        .unwrap();
    let replays = a.recent_replays(10).await.unwrap();
    assert_eq!(replays.len(), 1, "{replays:?}");
    assert_eq!(replays[0].message_id, dead);
    assert_eq!(replays[0].replayed_by, "ops");
    assert_eq!(replays[0].dead_reason.as_deref(), Some("gone"));
    assert!(
        a.recent_replays(0).await.unwrap().is_empty(),
        "the limit holds"
    );
}

#[tokio::test]
async fn migrations_are_read_and_checked() {
    let t = TestSchema::new("admin_migrations").await;
    let a = admin(&t);
    a.check_migrated().await.unwrap();
    let all: Vec<i32> = outbox::sql::MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(a.recorded_migrations().await.unwrap(), Some(all.clone()));

    let latest = *all.last().unwrap();
    t.exec(&format!(
        "DELETE FROM {{schema}}.schema_migrations WHERE version = {latest}"
    ))
    .await;
    assert_eq!(
        a.recorded_migrations().await.unwrap(),
        Some(all[..all.len() - 1].to_vec())
    );
    let err = a.check_migrated().await.unwrap_err();
    assert!(matches!(err, Error::SchemaBehind { .. }), "{err:?}");

    t.exec(&format!(
        "INSERT INTO {{schema}}.schema_migrations (version, name) \
         VALUES ({latest}, 'restored'), ({}, 'from a newer build')",
        latest + 1
    ))
    .await;
    let err = a.check_migrated().await.unwrap_err();
    assert!(matches!(err, Error::SchemaAhead { .. }), "{err:?}");

    let bare = outbox::Schema::new(&format!("{}_none", t.schema.name())).unwrap();
    let none = Admin::new(Store::new(t.pool.clone(), bare));
    assert_eq!(none.recorded_migrations().await.unwrap(), None);
    let err = none.check_migrated().await.unwrap_err();
    assert!(matches!(err, Error::NotMigrated(_)), "{err:?}");
}

#[tokio::test]
async fn ping_answers_only_with_a_database() {
    let t = TestSchema::new("admin_ping").await;
    admin(&t).ping().await.unwrap();
    // Nothing listens on port 1.
    let pool = outbox_relay::pool("postgres://postgres@127.0.0.1:1/postgres", 1).unwrap();
    let down = Admin::new(Store::new(pool, t.schema.clone()));
    assert!(down.ping().await.is_err());
    assert_eq!(down.schema(), &t.schema);
}

#[tokio::test]
async fn get_reads_checked_naming_the_column() {
    let t = TestSchema::new("admin_get").await;
    let client = t.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT 7::int8 AS n, 'x'::text AS t, 'infinity'::timestamptz AS at",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(get::<i64>(&row, "n").unwrap(), 7);
    assert_eq!(get::<Timestamp>(&row, "at").unwrap(), Timestamp::Infinity);
    for (err, column) in [
        (get::<i64>(&row, "t").unwrap_err(), "t"),
        (get::<i64>(&row, "missing").unwrap_err(), "missing"),
        (
            get::<chrono::DateTime<chrono::Utc>>(&row, "at").unwrap_err(),
            "at",
        ),
    ] {
        match err {
            Error::Decode { column: c, .. } => assert_eq!(c, column),
            other => panic!("{column}: {other:?}"),
        }
    }
}
