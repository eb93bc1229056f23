//! The PostgreSQL-table publisher through the same conformance suite. Its
//! sink, `published_events`, carries the whole envelope in columns of its
//! own (the message's enqueue time as `enqueued_at`; `created_at` is the
//! publish time), so the suite reads the envelope back from them. A sink
//! table made by an older build is upgraded in place.
#![cfg(feature = "publisher-postgres")]

use crate::conformance;

use conformance::{closed_port, message, unique, Harness, Received, Scope, Target};
use outbox::Schema;
use outbox_relay::publishers::postgres::{published_after, PostgresPublisher};
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_relay::{Envelope, Message, Publisher};
use outbox_testkit::TestSchema;

struct PostgresHarness {
    db: TestSchema,
}

impl PostgresHarness {
    async fn new() -> Self {
        Self {
            db: TestSchema::new("conformance_pg").await,
        }
    }
}

/// One sink row, every column the publisher writes.
struct SinkRow {
    publisher: String,
    /// The publish time.
    created_at: chrono::DateTime<chrono::Utc>,
    /// The envelope, when every one of its columns is filled (rows published
    /// before the sink had them hold NULL there).
    envelope: Option<Envelope>,
    event_id: uuid::Uuid,
    topic: String,
    payload: serde_json::Value,
    headers: serde_json::Value,
}

/// Every row of `schema`'s sink, oldest first, read as consumers do
/// ([`published_after`]).
async fn sink_rows(client: &tokio_postgres::Client, schema: &Schema) -> Vec<SinkRow> {
    published_after(client, schema, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let envelope = (|| {
                Some(Envelope {
                    event_id: r.event_id,
                    message_id: r.message_id,
                    event_type: r.event_type.clone()?,
                    event_version: r.event_version?,
                    aggregate_type: r.aggregate_type.clone()?,
                    aggregate_id: r.aggregate_id.clone()?,
                    topic: r.topic.clone(),
                    headers: serde_json::from_value(r.headers.clone()).unwrap(),
                    payload: r.payload.clone(),
                    created_at: r.enqueued_at?,
                })
            })();
            SinkRow {
                publisher: r.publisher,
                created_at: r.created_at,
                envelope,
                event_id: r.event_id,
                topic: r.topic,
                payload: r.payload.to_value().unwrap(),
                headers: r.headers,
            }
        })
        .collect()
}

impl Harness for PostgresHarness {
    type P = AnyPublisher;
    const DEDUPES: bool = false;

    async fn target(&self) -> Target<AnyPublisher> {
        let ctx = PublisherContext {
            pool: self.db.pool.clone(),
            schema: self.db.schema.clone(),
            relay_id: "conformance".into(),
            settings: Default::default(),
        };
        Target {
            publisher: AnyPublisher::from_url("postgres", &ctx).await.unwrap(),
            topic: unique("orders"),
        }
    }

    async fn read_back(&self, _: &Target<AnyPublisher>, topic: &str) -> Vec<Received> {
        let client = self.db.pool.get().await.unwrap();
        sink_rows(&client, &self.db.schema)
            .await
            .into_iter()
            .filter(|r| r.topic == topic)
            .map(|r| Received {
                event_id: r.event_id,
                payload: r.payload,
                envelope: Some(r.envelope.expect("a row the relay wrote has every field")),
            })
            .collect()
    }

    async fn unreachable(&self) -> AnyPublisher {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
        let pool = outbox_relay::pool(&url, 1).unwrap();
        AnyPublisher::Postgres(PostgresPublisher::new(pool, &self.db.schema, "conformance"))
    }

    /// PostgreSQL text cannot hold a NUL byte: SQLSTATE 22021, a data error.
    async fn refused_topic(&self, _: &Target<AnyPublisher>) -> (String, Scope) {
        ("bad\0topic".to_owned(), Scope::Topic)
    }
}

conformance_suite!(PostgresHarness::new().await);

/// A publisher writing to `t`'s schema in the test database through a URL,
/// so it creates (or upgrades) its sink there as a sink database apart from
/// the outbox would.
async fn url_publisher(t: &TestSchema) -> PostgresPublisher {
    let ctx = PublisherContext {
        pool: t.pool.clone(),
        schema: t.schema.clone(),
        relay_id: "sink-test".into(),
        settings: Default::default(),
    };
    PostgresPublisher::from_url(&outbox_testkit::database_url(), &ctx)
        .await
        .unwrap()
}

/// Publishes three messages and checks each arrived once with its whole
/// envelope, the enqueue time in `enqueued_at` and the publish time in
/// `created_at`.
async fn publishes_full_rows(t: &TestSchema, p: &PostgresPublisher) {
    let topic = unique("orders");
    let batch: Vec<Message> = (0..3).map(|n| message(&topic, n)).collect();
    let before = chrono::Utc::now();
    assert!(p.publish(&batch).await.iter().all(|o| o.is_ok()));
    let client = t.pool.get().await.unwrap();
    let rows: Vec<SinkRow> = sink_rows(&client, &t.schema)
        .await
        .into_iter()
        .filter(|r| r.topic == topic)
        .collect();
    assert_eq!(rows.len(), 3);
    for m in &batch {
        let r = rows.iter().find(|r| r.event_id == m.event_id).unwrap();
        let e = r.envelope.as_ref().expect("every envelope column filled");
        assert_eq!(e, &Envelope::from(m), "every envelope field intact");
        assert_eq!(
            e.created_at, m.created_at,
            "enqueued_at is the enqueue time"
        );
        assert!(
            r.created_at >= before - chrono::Duration::seconds(5),
            "created_at is the publish time: {} for a message enqueued at {}",
            r.created_at,
            m.created_at
        );
        assert_eq!(r.publisher, "sink-test");
    }
}

/// The sink's columns, in order, with their types and nullability.
async fn sink_columns(t: &TestSchema) -> Vec<(String, String, String)> {
    let client = t.pool.get().await.unwrap();
    client
        .query(
            "SELECT column_name::text, data_type::text, is_nullable::text \
               FROM information_schema.columns \
              WHERE table_schema = $1 AND table_name = 'published_events' \
              ORDER BY column_name",
            &[&t.name()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn an_old_sink_table_is_upgraded_and_then_receives_full_rows() {
    let t = TestSchema::unmigrated("pg_sink_old").await;
    // The sink as the first builds made it: the seed's columns and event_id,
    // no headers, no envelope; one row already published.
    t.exec(
        "CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.published_events ( \
           id BIGSERIAL PRIMARY KEY, message_id BIGINT NOT NULL, event_id UUID NOT NULL, \
           topic TEXT NOT NULL, payload JSONB NOT NULL, publisher TEXT NOT NULL, \
           created_at TIMESTAMPTZ NOT NULL DEFAULT now()); \
         INSERT INTO {schema}.published_events (message_id, event_id, topic, payload, publisher) \
           VALUES (1, gen_random_uuid(), 'old', '{\"n\": 0}', 'old-relay');",
    )
    .await;
    let p = url_publisher(&t).await;
    // The old row kept, its envelope columns empty, its headers '{}'.
    let client = t.pool.get().await.unwrap();
    let old = sink_rows(&client, &t.schema).await;
    assert_eq!(old.len(), 1);
    assert!(old[0].envelope.is_none());
    assert_eq!(old[0].headers, serde_json::json!({}));
    assert_eq!(old[0].publisher, "old-relay");
    publishes_full_rows(&t, &p).await;
    // Upgrading again changes nothing.
    let columns = sink_columns(&t).await;
    p.ensure_sink().await.unwrap();
    assert_eq!(sink_columns(&t).await, columns);
}

#[tokio::test]
async fn a_fresh_sink_table_gets_every_field_and_the_outbox_schema_shape() {
    let t = TestSchema::unmigrated("pg_sink_fresh").await;
    let p = url_publisher(&t).await;
    publishes_full_rows(&t, &p).await;
    // The same columns as the sink the migrations make in an outbox schema.
    let migrated = TestSchema::new("pg_sink_migrated").await;
    assert_eq!(sink_columns(&t).await, sink_columns(&migrated).await);
    let names: Vec<String> = sink_columns(&t).await.into_iter().map(|c| c.0).collect();
    for column in [
        "event_id",
        "message_id",
        "event_type",
        "event_version",
        "aggregate_type",
        "aggregate_id",
        "topic",
        "headers",
        "payload",
        "enqueued_at",
        "created_at",
        "publisher",
    ] {
        assert!(names.iter().any(|n| n == column), "{column}: {names:?}");
    }
}

/// The default publisher (the outbox database) writes through the columns
/// migration 8 added, when a relay publishes messages the library enqueued.
#[tokio::test]
async fn the_relay_fills_every_field_in_the_outbox_schema() {
    let t = TestSchema::new("pg_sink_relay").await;
    let client = t.pool.get().await.unwrap();
    let msg = outbox::NewMessage::new("order.created", "order", "42", &serde_json::json!({"n": 1}))
        .unwrap()
        .topic("orders")
        .header("tenant", "acme");
    outbox::Outbox::with_schema(t.schema.clone())
        .enqueue(&**client, &msg)
        .await
        .unwrap();
    let relay = outbox_relay::Relay::new(
        outbox_relay::Store::new(t.pool.clone(), t.schema.clone()),
        PostgresPublisher::new(t.pool.clone(), &t.schema, "relay"),
        Default::default(),
    )
    .unwrap();
    assert_eq!(relay.run_once().await.unwrap().marked_sent, 1);
    let rows = sink_rows(&client, &t.schema).await;
    assert_eq!(rows.len(), 1);
    let e = rows[0]
        .envelope
        .as_ref()
        .expect("every envelope column filled");
    let enqueued: chrono::DateTime<chrono::Utc> = client
        .query_one(
            &format!(
                "SELECT created_at FROM {}.all_messages WHERE status = 'sent'",
                t.schema.quoted()
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (
            e.event_type.as_str(),
            e.event_version,
            e.aggregate_type.as_str(),
            e.aggregate_id.as_str(),
            e.topic.as_str()
        ),
        ("order.created", 1, "order", "42", "orders")
    );
    assert_eq!(e.headers.get("tenant").map(String::as_str), Some("acme"));
    assert_eq!(
        e.created_at, enqueued,
        "enqueued_at is the message's created_at"
    );
    assert!(
        rows[0].created_at >= enqueued,
        "created_at is the publish time"
    );
}

/// Drops a role made by a test when the test ends, passed or failed: the
/// server is shared. `DROP OWNED BY` first takes its grants away.
struct RoleGuard(String);

impl Drop for RoleGuard {
    fn drop(&mut self) {
        let sql = format!("DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}", self.0);
        let url = outbox_testkit::database_url();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .ok()?;
                tokio::spawn(conn);
                client.batch_execute(&sql).await.ok()
            })
        })
        .join();
    }
}

/// A relay role with no CREATE right anywhere, only INSERT on an existing
/// sink table (with USAGE on its schema and its id sequence), delivers into
/// it. Before, the publisher always ran `CREATE SCHEMA IF NOT EXISTS`, and
/// PostgreSQL refused it ("permission denied for database") though the
/// schema existed.
#[tokio::test]
async fn a_role_with_only_insert_delivers_into_an_existing_sink() {
    let t = TestSchema::unmigrated("pg_sink_insert_only").await;
    // The sink made by its owner (here, as a relay with rights would).
    let _ = url_publisher(&t).await;
    let role = format!("t_sink_writer_{:08x}", rand::random::<u32>());
    t.exec(&format!("CREATE ROLE {role} LOGIN")).await;
    let _guard = RoleGuard(role.clone());
    t.exec(&format!(
        "GRANT USAGE ON SCHEMA {{schema}} TO {role}; \
         GRANT INSERT ON {{schema}}.published_events TO {role}; \
         GRANT USAGE ON SEQUENCE {{schema}}.published_events_id_seq TO {role};"
    ))
    .await;
    let cfg: tokio_postgres::Config = outbox_testkit::database_url().parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let url = format!(
        "postgres://{role}@{host}:{}/{}",
        cfg.get_ports().first().copied().unwrap_or(5432),
        cfg.get_dbname().unwrap_or("postgres")
    );
    let ctx = PublisherContext {
        pool: t.pool.clone(),
        schema: t.schema.clone(),
        relay_id: "sink-test".into(),
        settings: Default::default(),
    };
    let p = PostgresPublisher::from_url(&url, &ctx)
        .await
        .expect("no DDL for a sink that exists");
    publishes_full_rows(&t, &p).await;
}
