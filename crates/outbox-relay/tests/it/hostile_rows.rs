//! Rows PostgreSQL accepts that the relay once could not handle: each is
//! published as stored, or goes dead alone with a reason naming what is
//! wrong, and the healthy rows beside it are sent. Before, each of these
//! panicked the relay (exit 101) or failed every claim of every relay.
//!
//! Rows that migration 10's CHECK now refuses are written with the check
//! dropped: what a row written before the migration, or by someone who
//! dropped it, looks like to the relay.

use crate::support;

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Relay, RelayConfig, Store};
use outbox_testkit::{TestDatabase, TestSchema};

fn relay(t: &TestSchema) -> Relay<PostgresPublisher> {
    support::sink_relay(t, "r", RelayConfig::default())
}

/// Passes until one claims nothing; the messages each pass sent.
async fn drain(r: &Relay<PostgresPublisher>) -> u64 {
    let mut sent = 0;
    for _ in 0..20 {
        let s = r.run_once().await.unwrap();
        sent += s.marked_sent;
        if s.claimed == 0 {
            return sent;
        }
    }
    panic!("the relay kept claiming");
}

/// `n` healthy messages, aggregate ids `ok-1`...
async fn healthy(t: &TestSchema, n: usize) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', 'ok-' || g, 't', jsonb_build_object('n', g) FROM generate_series(1, {n}) g"
    ))
    .await;
}

async fn drop_state_check(t: &TestSchema) {
    t.exec("ALTER TABLE {schema}.messages DROP CONSTRAINT messages_state_valid")
        .await;
}

/// `(aggregate_id, status, dead_reason)` of every message, in id order.
async fn rows(t: &TestSchema) -> Vec<(String, String, Option<String>)> {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT aggregate_id, status, dead_reason FROM {}.all_messages ORDER BY id",
        t.schema.quoted()
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn payloads_a_json_tree_cannot_hold_are_published_as_stored() {
    let t = TestSchema::new("hostile_payloads").await;
    healthy(&t, 2).await;
    // 1,000 levels deep (serde_json stops at 128), and numbers beyond a
    // 64-bit float: valid jsonb, and the library enqueues them too.
    let deep = format!("{}1{}", "[".repeat(1000), "]".repeat(1000));
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) VALUES \
           ('e', 'a', 'deep', 't', '{deep}'), \
           ('e', 'a', 'huge', 't', '{{\"n\": 1e400, \"m\": -1e-400, \"k\": 123456789012345678901234567890}}')"
    ))
    .await;
    assert_eq!(drain(&relay(&t)).await, 4);
    // What reached the sink is the stored JSON, value for value.
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.published_events p \
               JOIN {schema}.all_messages s ON s.id = p.message_id \
              WHERE s.status = 'sent' AND p.payload = s.payload"
        )
        .await,
        4
    );
    assert!(rows(&t).await.iter().all(|(_, s, _)| s == "sent"));
}

#[tokio::test]
async fn times_the_envelope_cannot_carry_go_dead_alone_naming_the_column() {
    let t = TestSchema::new("hostile_times").await;
    // Migration 10 refuses them now...
    let client = t.pool.get().await.unwrap();
    let refused = client
        .batch_execute(&format!(
            "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, created_at) \
             VALUES ('e', 'a', 'x', 't', '{{}}', 'infinity')",
            t.schema.quoted()
        ))
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("messages_state_valid"),
        "{refused:?}"
    );
    // ...and rows written before it still go dead alone.
    drop_state_check(&t).await;
    healthy(&t, 3).await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, created_at) VALUES \
           ('e', 'a', 'inf', 't', '{}', 'infinity'), \
           ('e', 'a', 'neginf', 't', '{}', '-infinity'), \
           ('e', 'a', 'far', 't', '{}', '270000-01-01 00:00:00+00')",
    )
    .await;
    assert_eq!(drain(&relay(&t)).await, 3);
    for (id, status, reason) in rows(&t).await {
        if id.starts_with("ok-") {
            assert_eq!(status, "sent", "{id}");
        } else {
            assert_eq!(status, "dead", "{id}");
            let reason = reason.unwrap();
            assert!(
                reason.starts_with("column created_at: ")
                    && reason.ends_with("cannot be carried in the envelope"),
                "{id}: {reason}"
            );
        }
    }
}

#[tokio::test]
async fn attempts_at_the_integer_maximum_do_not_stop_the_claim() {
    let t = TestSchema::new("hostile_attempts").await;
    healthy(&t, 5).await;
    t.exec("UPDATE {schema}.messages SET attempts = 2147483647 WHERE aggregate_id = 'ok-2'")
        .await;
    assert_eq!(drain(&relay(&t)).await, 5);
    assert_eq!(
        t.count("SELECT attempts::int8 FROM {schema}.messages_sent WHERE aggregate_id = 'ok-2'")
            .await,
        2147483647
    );
}

#[tokio::test]
async fn a_lease_less_processing_row_is_taken_back() {
    let t = TestSchema::new("hostile_lease").await;
    drop_state_check(&t).await;
    healthy(&t, 1).await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status, attempts) \
         VALUES ('e', 'a', 'no-lease', 't', '{}', 'processing', 1), \
                ('e', 'a', 'future', 't', '{}', 'processing', 1)",
    )
    .await;
    t.exec(
        "UPDATE {schema}.messages SET locked_by = 'x', locked_at = now() + interval '1 day' \
          WHERE aggregate_id = 'future'",
    )
    .await;
    let r = relay(&t);
    assert_eq!(r.reap().await.unwrap(), 2);
    let left = t
        .count(
            "SELECT count(*) FROM {schema}.messages WHERE status = 'failed' AND locked_by IS NULL \
               AND (last_error = 'processing without a lease after 1 attempt' \
                    OR last_error LIKE 'lease expired (relay x claimed it at %')",
        )
        .await;
    assert_eq!(left, 2);
}

#[tokio::test]
async fn an_id_already_in_the_sent_table_goes_dead_alone_and_its_batch_is_sent() {
    let t = TestSchema::new("hostile_sent_id").await;
    healthy(&t, 3).await;
    // A sent row holding the id of the second message, as a row written
    // with an id the sequence had given out leaves it.
    t.exec(
        "INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, aggregate_type, \
           aggregate_id, topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
         SELECT id, gen_random_uuid(), 'older', 1, 'a', 'older', 't', '{}', '{}', 1, now(), now(), now() \
           FROM {schema}.messages WHERE aggregate_id = 'ok-2'",
    )
    .await;
    let r = relay(&t);
    assert_eq!(drain(&r).await, 2);
    let rows = rows(&t).await;
    let clash = rows.iter().find(|(id, _, _)| id == "ok-2").unwrap();
    assert_eq!(clash.1, "dead");
    assert!(
        clash
            .2
            .as_deref()
            .unwrap()
            .contains("is already in messages_sent"),
        "{clash:?}"
    );
    // The older sent row is as it was.
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.messages_sent WHERE aggregate_id = 'older'")
            .await,
        1
    );
}

/// A `SQL_ASCII` database stores any byte in a text or jsonb column; the
/// relay reads them as UTF-8. Such a row is not published altered: it goes
/// dead naming the column.
#[tokio::test]
async fn text_that_is_not_utf8_goes_dead_naming_the_column() {
    let db = TestDatabase::with_options(
        "sqlascii",
        "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
    )
    .await;
    let url = db.url();
    let pool = outbox_relay::pool(&url, 4).unwrap();
    let schema = outbox::Schema::new("outbox").unwrap();
    {
        let client = pool.get().await.unwrap();
        outbox::migrate(&**client, &schema).await.unwrap();
        client
            .batch_execute(
                "INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers) VALUES \
                   ('e', 'a', 'ok-1', 't', '{}', '{}'), \
                   ('e', 'a', 'topic', E't\\xff', '{}', '{}'), \
                   ('e', 'a', 'payload', 't', E'{\"a\": \"\\xfe\"}', '{}'), \
                   ('e', 'a', 'headers', 't', '{}', E'{\"h\": \"\\xfd\"}'), \
                   ('e', 'a', 'ok-2', 't', '{}', '{}')",
            )
            .await
            .unwrap();
    }
    let publisher = PostgresPublisher::new(pool.clone(), &schema, "r");
    let r = Relay::new(
        Store::new(pool.clone(), schema.clone()),
        publisher,
        RelayConfig {
            relay_id: "r".into(),
            ..RelayConfig::default()
        },
    )
    .unwrap();
    let mut sent = 0;
    for _ in 0..5 {
        sent += r
            .run_once()
            .await
            .map_err(|e| outbox_relay::error_chain(&e))
            .unwrap()
            .marked_sent;
    }
    assert_eq!(sent, 2);
    let client = pool.get().await.unwrap();
    let dead = client
        .query(
            "SELECT aggregate_id, dead_reason FROM outbox.all_messages WHERE status = 'dead' ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let dead: Vec<(String, String)> = dead.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(dead.len(), 3, "{dead:?}");
    for (column, reason) in &dead {
        assert!(
            reason.starts_with(&format!("column {column}: not valid UTF-8")),
            "{column}: {reason}"
        );
    }
    drop(client);
    drop(r);
    pool.close();
}

/// Ids given by hand at the ends of `int8` (the claim cursor and the
/// ordering gates do arithmetic on ids).
#[tokio::test]
async fn ids_at_the_ends_of_int8_are_sent() {
    let t = TestSchema::new("hostile_ids").await;
    healthy(&t, 2).await;
    t.exec(
        "INSERT INTO {schema}.messages (id, event_type, aggregate_type, aggregate_id, topic, payload) VALUES \
           (9223372036854775807, 'e', 'a', 'max', 't', '{}'), \
           (-9223372036854775808, 'e', 'a', 'min', 't', '{}'), \
           (0, 'e', 'a', 'zero', 't', '{}'), \
           (-1, 'e', 'a', 'max', 't', '{}')",
    )
    .await;
    healthy(&t, 2).await;
    let r = relay(&t);
    let mut sent = drain(&r).await;
    // A row below the claim floor waits for the next sweep: look again.
    for _ in 0..50 {
        if sent == 8 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        sent += drain(&r).await;
    }
    assert_eq!(sent, 8);
    assert!(rows(&t).await.iter().all(|(_, s, _)| s == "sent"));
}
