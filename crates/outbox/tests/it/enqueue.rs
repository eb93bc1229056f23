//! Enqueue in the caller's transaction, for both drivers, on the real
//! PostgreSQL: commit makes the message visible, rollback leaves nothing.

use outbox::{Delivery, Error, Inbox, InvalidMessage, NewMessage, Outbox};
use outbox_testkit::{database_url, TestSchema};
use serde_json::json;
use sqlx::Connection;

fn order(i: i64) -> NewMessage {
    NewMessage::new(
        "order.created",
        "order",
        i.to_string(),
        &json!({"order_id": i}),
    )
    .unwrap()
    .header(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
}

async fn tokio_client() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn tokio_postgres_commit_is_visible_and_rollback_is_not() {
    let t = TestSchema::new("tp_commit").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let mut client = tokio_client().await;

    let tx = client.transaction().await.unwrap();
    let kept = outbox.enqueue(&tx, &order(1)).await.unwrap();
    tx.commit().await.unwrap();

    let tx = client.transaction().await.unwrap();
    let dropped = outbox.enqueue(&tx, &order(2)).await.unwrap();
    tx.rollback().await.unwrap();

    let row = client
        .query_one(
            &format!(
                "SELECT count(*), max(event_id::text), max(headers->>'traceparent') FROM {}.all_messages",
                t.schema.quoted()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, String>(1), kept.event_id.to_string());
    assert!(row.get::<_, String>(2).starts_with("00-0af7"));
    assert_ne!(kept.event_id, dropped.event_id);
}

#[tokio::test]
async fn sqlx_commit_is_visible_and_rollback_is_not() {
    let t = TestSchema::new("sqlx_commit").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    let kept = outbox.enqueue(&mut *tx, &order(1)).await.unwrap();
    let many = outbox
        .enqueue_many(&mut *tx, &[order(2), order(3)])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    outbox.enqueue(&mut *tx, &order(4)).await.unwrap();
    tx.rollback().await.unwrap();

    let ids: Vec<(i64, uuid::Uuid)> = sqlx::query_as(&format!(
        "SELECT id, event_id FROM {}.all_messages ORDER BY id",
        t.schema.quoted()
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let expected: Vec<(i64, uuid::Uuid)> = std::iter::once(kept)
        .chain(many)
        .map(|e| (e.id, e.event_id))
        .collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn enqueue_many_returns_ids_in_input_order() {
    let t = TestSchema::new("many_order").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = tokio_client().await;
    let msgs: Vec<NewMessage> = (0..300).map(order).collect();
    let enqueued = outbox.enqueue_many(&client, &msgs).await.unwrap();
    assert_eq!(enqueued.len(), 300);
    for (i, e) in enqueued.iter().enumerate() {
        let aggregate_id: String = client
            .query_one(
                &format!(
                    "SELECT aggregate_id FROM {}.messages WHERE id = $1 AND event_id = $2",
                    t.schema.quoted()
                ),
                &[&e.id, &e.event_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(aggregate_id, i.to_string());
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_written() {
    let t = TestSchema::new("bad_input").await;
    let outbox = Outbox::with_schema(t.schema.clone()).max_payload_bytes(64);
    let client = tokio_client().await;

    let empty_topic = order(1).topic("");
    let err = outbox.enqueue(&client, &empty_topic).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidMessage(InvalidMessage::EmptyTopic)),
        "{err}"
    );

    let big = NewMessage::new("t", "a", "1", &"x".repeat(100)).unwrap();
    let err = outbox
        .enqueue_many(&client, &[order(2), big])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidMessage(InvalidMessage::PayloadTooLarge { limit: 64, .. })
        ),
        "{err}"
    );

    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages").await,
        0
    );
}

#[tokio::test]
async fn default_payload_limit_is_one_mebibyte() {
    let t = TestSchema::new("mib_limit").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = tokio_client().await;
    // A JSON string of n chars serializes to n + 2 bytes with its quotes.
    let at_limit = NewMessage::new("t", "a", "1", &"x".repeat((1 << 20) - 2)).unwrap();
    let over = NewMessage::new("t", "a", "1", &"x".repeat((1 << 20) - 1)).unwrap();
    outbox.enqueue(&client, &at_limit).await.unwrap();
    assert!(outbox.enqueue(&client, &over).await.is_err());
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages").await, 1);
}

#[tokio::test]
async fn a_caller_chosen_event_id_is_unique() {
    let t = TestSchema::new("event_id_unique").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = tokio_client().await;
    let id = uuid::Uuid::new_v4();
    let first = outbox
        .enqueue(&client, &order(1).event_id(id))
        .await
        .unwrap();
    assert_eq!(first.event_id, id);
    let err = outbox
        .enqueue(&client, &order(1).event_id(id))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateEvent { .. }), "{err}");
    assert_eq!(err.kind(), outbox::ErrorKind::DuplicateEvent);
    // The driver's error is the source, not repeated in the message.
    assert_eq!(err.to_string(), "event_id already in the outbox");
    let source = std::error::Error::source(&err).expect("the driver's error is chained");
    let pg = source
        .downcast_ref::<tokio_postgres::Error>()
        .expect("a tokio-postgres error");
    assert_eq!(
        pg.code(),
        Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
    );
}

/// The same kind through sqlx, and in a batch; any other database error
/// stays `Database`.
#[tokio::test]
async fn a_taken_event_id_is_its_own_kind_through_sqlx_and_in_batches() {
    let t = TestSchema::new("event_id_kind").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let id = uuid::Uuid::new_v4();
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    outbox
        .enqueue(&mut conn, &order(1).event_id(id))
        .await
        .unwrap();
    let again = outbox.enqueue(&mut conn, &order(1).event_id(id)).await;
    assert!(
        matches!(again, Err(Error::DuplicateEvent { .. })),
        "{again:?}"
    );
    let client = tokio_client().await;
    let batch = [order(2), order(3).event_id(id)];
    let err = outbox.enqueue_many(&client, &batch).await.unwrap_err();
    assert!(matches!(err, Error::DuplicateEvent { .. }), "{err}");
    assert_eq!(err.kind(), outbox::ErrorKind::DuplicateEvent);
    // Not every database error is a duplicate.
    let missing = Outbox::with_schema(outbox::Schema::new("no_such_schema_here").unwrap());
    let err = missing.enqueue(&client, &order(4)).await.unwrap_err();
    assert!(matches!(err, Error::Database { .. }), "{err}");
    assert_eq!(err.kind(), outbox::ErrorKind::Database);
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages").await, 1);
}

#[tokio::test]
async fn migrations_run_twice_and_concurrently() {
    let t = TestSchema::unmigrated("migrate_twice").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let (a, b) = (tokio_client().await, tokio_client().await);
    let (ra, rb) = tokio::join!(outbox.migrate(&a), outbox.migrate(&b));
    ra.unwrap();
    rb.unwrap();
    outbox.migrate(&a).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    outbox.migrate(&mut conn).await.unwrap();
    let versions = t
        .count("SELECT count(*) FROM {schema}.schema_migrations")
        .await;
    assert_eq!(versions as usize, outbox::sql::MIGRATIONS.len());
}

#[tokio::test]
async fn a_schema_from_a_newer_build_is_refused() {
    let t = TestSchema::new("newer_schema").await;
    t.exec("INSERT INTO {schema}.schema_migrations (version, name) VALUES (9999, 'future')")
        .await;
    let client = tokio_client().await;
    let err = outbox::migrate(&client, &t.schema).await.unwrap_err();
    // The server's refusal is the source of the library's error.
    let pg = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
        .expect("the driver's error is chained");
    let text = outbox::describe_tokio_postgres(pg);
    assert!(text.contains("newer outbox"), "{text}");
}

#[tokio::test]
async fn a_plain_sql_insert_is_a_valid_enqueue() {
    let t = TestSchema::new("plain_sql").await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('order.created', 'order', '1', 'order.created', '{\"a\": 1}')",
    )
    .await;
    let n = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND event_version = 1 AND headers = '{}'")
        .await;
    assert_eq!(n, 1);
}

#[tokio::test]
async fn inbox_tells_first_delivery_from_duplicate_and_rolls_back_with_the_consumer() {
    let t = TestSchema::new("inbox").await;
    let inbox = Inbox::with_schema(&t.schema);
    let mut client = tokio_client().await;
    let event = uuid::Uuid::now_v7();

    // A consumer that fails mid-way rolls back its inbox record too.
    let tx = client.transaction().await.unwrap();
    assert_eq!(
        inbox.record(&tx, event, "orders").await.unwrap(),
        Delivery::First
    );
    tx.rollback().await.unwrap();

    let tx = client.transaction().await.unwrap();
    assert_eq!(
        inbox.record(&tx, event, "orders").await.unwrap(),
        Delivery::First
    );
    tx.commit().await.unwrap();

    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    assert_eq!(
        inbox.record(&mut *tx, event, "orders").await.unwrap(),
        Delivery::Duplicate
    );
    tx.commit().await.unwrap();
}

/// A plain SQL insert of `headers` (JSON text): `Ok` or the SQLSTATE.
async fn sql_insert_headers(
    client: &tokio_postgres::Client,
    t: &TestSchema,
    headers: &str,
) -> Result<(), String> {
    client
        .execute(
            &format!(
                "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers) \
                 VALUES ('e', 'a', '1', 't', '{{}}', $1::text::jsonb)",
                t.schema.quoted()
            ),
            &[&headers],
        )
        .await
        .map(|_| ())
        .map_err(|e| e.code().map(|c| c.code().to_owned()).unwrap_or_default())
}

#[tokio::test]
async fn the_library_and_the_sql_check_refuse_the_same_header_names() {
    let t = TestSchema::new("reserved_headers").await;
    let outbox = Outbox::with_schema(t.schema.clone());
    let client = tokio_client().await;
    let near_misses = [
        "traceparent",
        "tracestate",
        "tenant",
        "Source",
        "ID",
        "ids",
        "sourcex",
        "x-source",
        "ce",
        "cex-type",
        "x-ce-type",
        "CE-type",
    ];
    let prefixed = ["ce-type", "ce-id", "ce_source", "ce-anything", "ce_"];
    let names = outbox::RESERVED_HEADERS
        .iter()
        .chain(&prefixed)
        .chain(&near_misses);
    for name in names {
        let reserved = outbox::reserved_header(name).is_some();
        let msg = order(1).header(*name, "v");
        match outbox.enqueue(&client, &msg).await {
            Err(Error::InvalidMessage(InvalidMessage::ReservedHeader { name: n, .. })) => {
                assert!(reserved, "{name} refused by the library");
                assert_eq!(n, *name);
            }
            Ok(_) => assert!(!reserved, "{name} accepted by the library"),
            Err(e) => panic!("{name}: {e}"),
        }
        let mut one = serde_json::Map::new();
        one.insert(name.to_string(), "v".into());
        let json = serde_json::Value::Object(one).to_string();
        match sql_insert_headers(&client, &t, &json).await {
            Ok(()) => assert!(!reserved, "{name} accepted by the CHECK"),
            Err(code) => {
                assert!(reserved, "{name} refused by the CHECK ({code})");
                assert_eq!(code, "23514", "{name}: a check violation");
            }
        }
    }
    // The library's message names the header and why.
    let err = outbox
        .enqueue(&client, &order(1).header("source", "x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("header \"source\" is reserved"), "{err}");
}

#[tokio::test]
async fn plain_sql_headers_must_be_an_object_of_strings() {
    let t = TestSchema::new("headers_shape").await;
    let client = tokio_client().await;
    for bad in [
        "[]",
        "[{\"a\": \"b\"}]",
        "\"text\"",
        "1",
        "null",
        "true",
        "{\"n\": 1}",
        "{\"o\": {\"a\": \"b\"}}",
        "{\"a\": \"b\", \"nil\": null}",
    ] {
        assert_eq!(
            sql_insert_headers(&client, &t, bad).await,
            Err("23514".to_owned()),
            "{bad}"
        );
    }
    for good in ["{}", "{\"traceparent\": \"00-x\", \"Source\": \"crm\"}"] {
        sql_insert_headers(&client, &t, good).await.unwrap();
    }
    // The default still applies when the column is left out.
    client
        .batch_execute(&format!(
            "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
             VALUES ('e', 'a', '1', 't', '{{}}')",
            t.schema.quoted()
        ))
        .await
        .unwrap();
    assert_eq!(t.count("SELECT count(*) FROM {schema}.messages").await, 3);
}

/// The id's default takes the transaction's xid before it draws the id
/// (migration 9): a transaction holding an id is then a running transaction
/// in every snapshot taken after, which the relay's claim floor relies on.
/// With the plain `nextval` default the transaction mostly had no xid yet
/// at this point, and a backend preempted before writing its row let the
/// floor pass it.
#[tokio::test]
async fn the_id_default_takes_an_xid_before_the_id() {
    let t = TestSchema::new("enqueue_id_after_xid").await;
    let default: String = t
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT column_default FROM information_schema.columns \
              WHERE table_schema = $1 AND table_name = 'messages' AND column_name = 'id'",
            &[&t.schema.name()],
        )
        .await
        .unwrap()
        .get(0);
    let mut client = t.pool.get().await.unwrap();
    // nextval takes an xid only on the calls it WAL-logs (one in 32, and
    // the first of a new sequence): draw one before, so the next is not.
    client
        .query_one(&format!("SELECT ({default})::int8"), &[])
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let before: Option<String> = tx
        .query_one("SELECT pg_current_xact_id_if_assigned()::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(before, None, "a fresh transaction has no xid");
    let id: i64 = tx
        .query_one(&format!("SELECT ({default})::int8"), &[])
        .await
        .unwrap()
        .get(0);
    let after: Option<String> = tx
        .query_one("SELECT pg_current_xact_id_if_assigned()::text", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        after.is_some(),
        "id {id} drawn by `{default}` in a transaction without an xid"
    );
    tx.rollback().await.unwrap();
}
