//! Dead-letter handling on the real PostgreSQL, one schema per test.

use outbox_relay::{DeadLetters, Error, ReplayTarget, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;

/// Inserts a dead message on `topic`, dead for `age_hours`; returns its id.
async fn dead(t: &TestSchema, topic: &str, age_hours: i32) -> i64 {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           headers, status, attempts, last_error, dead_at, dead_reason) \
         VALUES ('e', 'a', '1', $1, '{{\"k\": 1}}', '{{\"h\": \"v\"}}', 'dead', 10, 'boom', \
           now() - $2::int * interval '1 hour', 'max attempts (10) reached: boom') RETURNING id",
        t.schema.quoted()
    );
    client
        .query_one(&sql, &[&topic, &age_hours])
        .await
        .unwrap()
        .get(0)
}

async fn pending(t: &TestSchema) -> i64 {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('e', 'a', '1', 't', '{{}}') RETURNING id",
        t.schema.quoted()
    );
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

fn letters(t: &TestSchema) -> DeadLetters {
    DeadLetters::new(Store::new(t.pool.clone(), t.schema.clone()))
}

#[tokio::test]
async fn list_filters_by_topic_and_limit() {
    let t = TestSchema::new("dead_list").await;
    let a1 = dead(&t, "a", 1).await;
    let _b = dead(&t, "b", 1).await;
    let a2 = dead(&t, "a", 1).await;
    pending(&t).await;
    let d = letters(&t);
    assert_eq!(d.list(None, 100).await.unwrap().len(), 3);
    let ids: Vec<i64> = d
        .list(Some("a"), 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.as_ref().unwrap().id)
        .collect();
    assert_eq!(ids, [a1, a2]);
    assert_eq!(d.list(None, 1).await.unwrap().len(), 1);
    let m = d.show(a1).await.unwrap();
    assert_eq!(m.attempts, 10);
    assert_eq!(m.last_error.as_deref(), Some("boom"));
    assert!(m.dead_reason.unwrap().contains("max attempts"));
    assert_eq!(m.payload.to_value().unwrap()["k"], 1);
}

#[tokio::test]
async fn replay_by_id_resets_and_records() {
    let t = TestSchema::new("dead_replay_id").await;
    let id = dead(&t, "a", 1).await;
    let other = dead(&t, "a", 1).await;
    let replayed = letters(&t)
        .replay(&ReplayTarget::Ids(vec![id, id]), Some("alice"))
        .await
        .unwrap();
    assert_eq!(replayed, [id]);
    let row = t
        .count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {id} AND status = 'pending' \
               AND attempts = 0 AND dead_at IS NULL AND dead_reason IS NULL \
               AND last_error IS NULL AND next_run_at <= now() AND locked_by IS NULL"
        ))
        .await;
    assert_eq!(row, 1);
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.dead_replays WHERE message_id = {id} \
               AND replayed_by = 'alice' AND attempts = 10 AND last_error = 'boom' \
               AND dead_reason LIKE 'max attempts%' AND dead_at IS NOT NULL"
        ))
        .await,
        1
    );
    // The other dead message was not touched.
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {other} AND status = 'dead'"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn replay_by_id_is_all_or_nothing() {
    let t = TestSchema::new("dead_replay_strict").await;
    let d1 = dead(&t, "a", 1).await;
    let p = pending(&t).await;
    let err = letters(&t)
        .replay(&ReplayTarget::Ids(vec![d1, p, 999_999]), None)
        .await
        .unwrap_err();
    let Error::NotDead(list) = &err else {
        panic!("{err}")
    };
    assert_eq!(list.len(), 2);
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("message {p} is not dead (status pending)")),
        "{msg}"
    );
    assert!(msg.contains("message 999999 not found"), "{msg}");
    // Nothing half-done: d1 is still dead and no replay was recorded.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.dead_replays").await,
        0
    );
}

#[tokio::test]
async fn replay_all_and_by_topic() {
    let t = TestSchema::new("dead_replay_all").await;
    dead(&t, "a", 1).await;
    dead(&t, "a", 1).await;
    let b = dead(&t, "b", 1).await;
    let d = letters(&t);
    assert_eq!(
        d.replay(&ReplayTarget::Topic("b".into()), None)
            .await
            .unwrap(),
        [b]
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        2
    );
    assert_eq!(d.replay(&ReplayTarget::All, None).await.unwrap().len(), 2);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending'")
            .await,
        3
    );
    // Without --by, the database user is recorded.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.dead_replays WHERE replayed_by = session_user")
            .await,
        3
    );
    assert!(d.replay(&ReplayTarget::All, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn purge_deletes_only_old_dead_rows() {
    let t = TestSchema::new("dead_purge").await;
    let _old = dead(&t, "a", 48).await;
    let young = dead(&t, "a", 1).await;
    let p = pending(&t).await;
    let d = letters(&t);
    let purged = d.purge(Duration::from_secs(24 * 3600)).await.unwrap();
    assert_eq!(purged, 1);
    let left: Vec<i64> = d
        .list(None, 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.as_ref().unwrap().id)
        .collect();
    assert_eq!(left, [young]);
    assert!(matches!(d.show(p).await, Err(Error::NotDead(_))));
}

/// The operator page's filter: newest death first; text matched as a
/// case-insensitive substring (never a LIKE pattern) of the reason, last
/// error, event type, aggregate id or payload; replay of all that match.
#[tokio::test]
async fn newest_and_replay_matching_a_text_filter() {
    let t = TestSchema::new("dead_matching").await;
    let old = dead(&t, "a", 5).await;
    let new = dead(&t, "a", 1).await;
    let other = dead(&t, "b", 2).await;
    t.exec(&format!(
        "UPDATE {{schema}}.messages SET dead_reason = 'HTTP 422: 100% wrong', \
           payload = '{{\"order\": \"X-77\"}}' WHERE id = {new}"
    ))
    .await;
    let d = letters(&t);
    let ids =
        |v: Vec<outbox_relay::admin::DeadSummary>| v.into_iter().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(
        ids(d.newest(None, None, 10).await.unwrap()),
        [new, other, old]
    );
    assert_eq!(
        ids(d.newest(Some("a"), None, 10).await.unwrap()),
        [new, old]
    );
    assert_eq!(ids(d.newest(None, Some("x-77"), 10).await.unwrap()), [new]);
    // `%` and `_` are text, not wildcards.
    assert_eq!(ids(d.newest(None, Some("100%"), 10).await.unwrap()), [new]);
    assert!(d.newest(None, Some("1_0"), 10).await.unwrap().is_empty());
    // The last error of both, the reason of one.
    assert_eq!(d.count_matching(Some("a"), Some("BOOM")).await.unwrap(), 2);
    assert_eq!(d.count_matching(Some("a"), Some("WRONG")).await.unwrap(), 1);
    let target = ReplayTarget::Matching {
        topic: Some("a".into()),
        text: Some("422".into()),
    };
    assert_eq!(d.replay(&target, Some("page")).await.unwrap(), [new]);
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        2
    );
    let all = ReplayTarget::Matching {
        topic: None,
        text: None,
    };
    assert_eq!(d.replay(&all, None).await.unwrap(), [old, other]);
}

/// The API reads every row PostgreSQL accepts: a payload nested 300 deep,
/// a number beyond a 64-bit float, infinite and far times, bytes kept as
/// stored; and lists rows in states the relay never writes (a `dead_at` on
/// a pending row, `dead` without a `dead_at`). Before, `list` panicked on
/// the first of them.
#[tokio::test]
async fn list_and_show_read_every_row_postgres_accepts() {
    let t = TestSchema::new("dead_hostile_api").await;
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    // Some states migration 10 refuses: rows written before it.
    t.exec(&format!(
        "ALTER TABLE {{schema}}.messages DROP CONSTRAINT messages_state_valid; \
         INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, next_run_at, dead_at, created_at) VALUES \
         ('e', 'a', '1', 'deep', '{deep}', 'dead', now(), now(), now()), \
         ('e', 'a', '2', 'num', '{{\"n\": 1e400}}', 'dead', now(), now(), now()), \
         ('e', 'a', '3', 'inf', '{{}}', 'dead', 'infinity', 'infinity', '-infinity'), \
         ('e', 'a', '4', 'far', '{{}}', 'dead', now(), '294000-01-01', now()), \
         ('e', 'a', '5', 'odd', '{{}}', 'pending', now(), now(), now()), \
         ('e', 'a', '6', 'odd', '{{}}', 'dead', now(), NULL, now()), \
         ('e', 'a', '7', 'odd', '{{}}', 'pending', now(), NULL, now())"
    ))
    .await;
    let d = letters(&t);
    let list = d.list(None, 100).await.unwrap();
    assert_eq!(list.len(), 6, "the plain pending row is not dead: {list:?}");
    let rows: Vec<_> = list.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(rows[0].payload.get(), deep);
    assert!(rows[1].payload.get().contains(&"0".repeat(400)));
    assert_eq!(rows[2].dead_at.unwrap().to_string(), "infinity");
    assert_eq!(rows[2].created_at.to_string(), "-infinity");
    assert!(rows[3]
        .dead_at
        .unwrap()
        .to_string()
        .contains("out of range"));
    assert_eq!(rows[4].status, "pending");
    assert!(rows[5].dead_at.is_none());
    // show reads each, including the pending row with a dead_at.
    for r in &rows {
        assert_eq!(d.show(r.id).await.unwrap().id, r.id);
    }
}
