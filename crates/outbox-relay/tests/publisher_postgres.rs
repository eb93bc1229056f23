//! The PostgreSQL-table publisher through the same conformance suite. Its
//! sink, `published_events`, keeps only the columns the contract gives it
//! (event_id, topic, payload, ...), so the suite checks those.
#![cfg(feature = "publisher-postgres")]

mod conformance;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox::sql::Queries;
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_testkit::TestSchema;
use std::sync::Arc;

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

impl Harness for PostgresHarness {
    type P = AnyPublisher;
    const DEDUPES: bool = false;

    async fn target(&self) -> Target<AnyPublisher> {
        let ctx = PublisherContext {
            pool: self.db.pool.clone(),
            schema: self.db.schema.clone(),
            relay_id: "conformance".into(),
        };
        Target {
            publisher: AnyPublisher::from_url("postgres", &ctx).await.unwrap(),
            topic: unique("orders"),
        }
    }

    async fn another_topic(&self, _: &Target<AnyPublisher>) -> String {
        unique("other")
    }

    async fn read_back(&self, _: &Target<AnyPublisher>, topic: &str) -> Vec<Received> {
        let client = self.db.pool.get().await.unwrap();
        let q = Queries::new(&self.db.schema);
        client
            .query(q.sink_read_after.as_str(), &[&0_i64])
            .await
            .unwrap()
            .iter()
            .filter(|r| r.get::<_, &str>(2) == topic)
            .map(|r| Received {
                event_id: r.get(1),
                payload: r.get(3),
                envelope: None,
            })
            .collect()
    }

    async fn unreachable(&self) -> AnyPublisher {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
        let pool = outbox_relay::pool(&url, 1).unwrap();
        let queries = Arc::new(Queries::new(&self.db.schema));
        AnyPublisher::Postgres(PostgresPublisher::new(pool, queries, "conformance"))
    }

    /// PostgreSQL text cannot hold a NUL byte: SQLSTATE 22021, a data error.
    async fn refused_topic(&self, _: &Target<AnyPublisher>) -> (String, Scope) {
        ("bad\0topic".to_owned(), Scope::Topic)
    }
}

conformance_suite!(PostgresHarness::new().await);
