//! Rows whose headers break the envelope's rule (written before migration 6
//! added its CHECK, or with the CHECK dropped) fail alone: each goes dead
//! with a reason naming what is wrong, the rest of the batch is published.

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Relay, RelayConfig, Store};
use outbox_testkit::TestSchema;

#[tokio::test]
async fn a_row_with_bad_headers_goes_dead_alone() {
    let t = TestSchema::new("bad_headers").await;
    // As if written before the rule existed.
    t.exec(
        "ALTER TABLE {schema}.messages DROP CONSTRAINT messages_headers_valid; \
         INSERT INTO {schema}.messages (aggregate_id, headers, event_type, aggregate_type, topic, payload) VALUES \
           ('good_1', '{\"tenant\": \"acme\"}', 'e', 'a', 't', '{}'), \
           ('array', '[\"x\"]', 'e', 'a', 't', '{}'), \
           ('null', 'null', 'e', 'a', 't', '{}'), \
           ('number', '{\"retries\": 3}', 'e', 'a', 't', '{}'), \
           ('source', '{\"source\": \"crm\"}', 'e', 'a', 't', '{}'), \
           ('ce', '{\"ce-type\": \"forged\"}', 'e', 'a', 't', '{}'), \
           ('good_2', '{}', 'e', 'a', 't', '{}');",
    )
    .await;
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, "r1");
    let relay = Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        RelayConfig::default(),
    )
    .unwrap();

    let stats = relay.run_once().await.unwrap();
    assert_eq!(
        (
            stats.claimed,
            stats.published,
            stats.marked_sent,
            stats.dead
        ),
        (7, 2, 2, 5),
        "{stats:?}"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        2
    );
    for (aggregate_id, reason) in [
        (
            "array",
            "headers are a JSON array, not an object of strings",
        ),
        ("null", "headers are a JSON null, not an object of strings"),
        (
            "number",
            "header \"retries\" is a JSON number, not a string",
        ),
        ("source", "header \"source\" is reserved"),
        ("ce", "header \"ce-type\" is reserved"),
    ] {
        let client = t.pool.get().await.unwrap();
        let row = client
            .query_one(
                &format!(
                    "SELECT status, dead_reason FROM {}.all_messages WHERE aggregate_id = $1",
                    t.schema.quoted()
                ),
                &[&aggregate_id],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "dead", "{aggregate_id}");
        let got: String = row.get(1);
        assert!(got.contains(reason), "{aggregate_id}: {got}");
    }
    assert_eq!(relay.run_once().await.unwrap().claimed, 0);
}
