//! What a claim costs: it reads no more as settled rows pile up ahead of
//! it, and it rewrites claimed rows in place (HOT updates).

use crate::support;

use outbox_relay::store::statement_for_tests;
use outbox_relay::{RelayConfig, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;
use support::{enqueue_n as enqueue, sink_relay as relay};

/// Buffers (hit or read) that `statement` touches, run under EXPLAIN
/// ANALYZE after `setup` in a transaction that is rolled back.
async fn buffers_read(client: &mut deadpool_postgres::Client, setup: &str, statement: &str) -> i64 {
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(setup).await.unwrap();
    let plan: serde_json::Value = tx
        .query_one(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    tx.rollback().await.unwrap();
    let p = &plan[0]["Plan"];
    p["Shared Hit Blocks"].as_i64().unwrap() + p["Shared Read Blocks"].as_i64().unwrap()
}

/// The trap DESIGN.md measured: a claim ordered by id that walks past every
/// settled row. Settled rows ahead of the pending ones must not change how
/// much the claim reads. Buffers touched is a count, not a time, so the
/// check does not depend on the machine's speed.
#[tokio::test]
async fn claim_cost_does_not_grow_with_settled_rows_ahead() {
    let t = TestSchema::new("relay_claim_cost").await;
    let claim_buffers = |t: &TestSchema| {
        let sql = statement_for_tests(&t.schema, "claim")
            .unwrap()
            .replace("$1", "500")
            .replace("$2", "'probe'")
            .replace("$3", &i64::MIN.to_string())
            .replace("$4", &i64::MAX.to_string())
            .replace("$5", &i64::MAX.to_string());
        let pool = t.pool.clone();
        async move {
            let mut client = pool.get().await.unwrap();
            buffers_read(&mut client, "", &sql).await
        }
    };
    enqueue(&t, 500, "t").await;
    let empty_ahead = claim_buffers(&t).await;

    let t2 = TestSchema::new("relay_claim_cost_full").await;
    // 200,000 settled rows with lower ids than every pending one: sent rows
    // in the sent table and, the worst case for the hot table, dead rows
    // (which stay in it; migration 10 refuses rows marked sent in place).
    t2.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status, dead_at) \
           SELECT 'x', 'a', g::text, 't', '{}', 'dead', now() \
           FROM generate_series(1, 100000) g; \
         INSERT INTO {schema}.messages_sent (id, event_id, event_type, event_version, aggregate_type, aggregate_id, \
             topic, payload, headers, attempts, next_run_at, created_at, sent_at) \
           SELECT -g, gen_random_uuid(), 'x', 1, 'a', g::text, 't', '{}', '{}', 1, now(), now(), now() \
           FROM generate_series(1, 100000) g; \
         ANALYZE {schema}.messages;",
    )
    .await;
    enqueue(&t2, 500, "t").await;
    let full_ahead = claim_buffers(&t2).await;
    eprintln!("claim of 500: {empty_ahead} buffers with nothing ahead, {full_ahead} with 200,000 settled rows ahead");
    assert!(
        full_ahead < empty_ahead * 3 / 2 + 50,
        "claim read {full_ahead} buffers with settled rows ahead vs {empty_ahead} without"
    );
    let stats = relay(&t2, "r", RelayConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(stats.marked_sent, 500);
}

/// Claims must be HOT updates (the row rewritten on its own page, no new
/// index entries): that halved the claim's cost. Two ways to lose it
/// without any test turning red are an index that mentions a column the
/// claim writes, and pages too full to hold the claimed versions; this
/// counts what PostgreSQL actually did.
#[tokio::test]
async fn claims_are_hot_updates() {
    let t = TestSchema::new("relay_hot_claims").await;
    enqueue(&t, 2000, "t").await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    let mut claimed = 0;
    for _ in 0..4 {
        claimed += store
            .claim_messages(outbox_relay::store::ClaimParams {
                limit: 500,
                relay_id: "hot",
                from_id: i64::MIN,
                max_batch_bytes: i64::MAX,
                max_message_bytes: i64::MAX,
                ordered: None,
            })
            .await
            .unwrap()
            .messages
            .len();
    }
    assert_eq!(claimed, 2000);
    // Statistics reach the shared counters lazily; flush this backend's
    // and read them in a fresh transaction. The claims ran on pooled
    // connections, so flush every one of them by running through the pool.
    let client = t.pool.get().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (updated, hot): (i64, i64) = loop {
        client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .await
            .unwrap();
        let row = client
            .query_one(
                &format!(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
                      WHERE relid = '{}.messages'::regclass",
                    t.schema.quoted()
                ),
                &[],
            )
            .await
            .unwrap();
        let (u, h): (i64, i64) = (row.get(0), row.get(1));
        if u >= 2000 || std::time::Instant::now() > deadline {
            break (u, h);
        }
        client
            .batch_execute("SELECT pg_sleep(0.2), pg_stat_clear_snapshot()")
            .await
            .unwrap();
    };
    eprintln!("claims: {updated} updates, {hot} HOT");
    assert_eq!(updated, 2000, "statistics never showed the claims");
    // Before migration 5 this was 0. Not 100%: a claimed version is a few
    // bytes longer (locked_by, locked_at), so a page filled to exactly half
    // cannot always hold all of them.
    assert!(
        hot * 5 >= updated * 4,
        "only {hot} of {updated} claim updates were HOT"
    );
}

/// The claim with ordering on and a filter (a relay owning some of the
/// buckets, aggregates held back) must keep walking the claimable index in
/// id order and stop where its bounded span ends: a plan that sorts what it
/// filters would read the whole backlog. The filter is plain SQL the
/// planner can see; this holds for the plan made for the values at hand and
/// for the generic plan a prepared statement switches to. Buffers touched,
/// not time: a 100,000-message backlog against a 4,000-message one.
#[tokio::test]
async fn a_filtered_claim_reads_the_claimable_index_in_id_order() {
    let claim_buffers = |rows: i64| async move {
        let t = TestSchema::new("relay_filtered_claim_plan").await;
        t.exec(&format!(
            "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
               SELECT 'x', 'order', (g % 10000)::text, 't', jsonb_build_object('i', g) \
                 FROM generate_series(1, {rows}) g; \
             ANALYZE {{schema}}.messages;"
        ))
        .await;
        let store = Store::new(t.pool.clone(), t.schema.clone());
        store
            .relay_heartbeat("probe", 1, "aggregate", Duration::from_secs(30))
            .await
            .unwrap();
        let sql = statement_for_tests(&t.schema, "claim_ordered_filtered").unwrap();
        // A quarter of the buckets, and one aggregate held back.
        let owned = format!("'\\x{}'::bytea", "11".repeat(128));
        let mut client = t.pool.get().await.unwrap();
        client
            .batch_execute(&format!(
                "PREPARE filtered_claim(int8, text, int8, int8, int8, int8, bytea, int8[], int8[], int8) AS {sql}"
            ))
            .await
            .unwrap();
        let mut read = Vec::new();
        for mode in ["force_custom_plan", "force_generic_plan"] {
            let execute = format!(
                "EXECUTE filtered_claim(500, 'probe', 0, {max}, {max}, 1, {owned}, '{{7}}', '{{0}}', 2000)",
                max = i64::MAX
            );
            let setup = format!("SET LOCAL plan_cache_mode = {mode}");
            read.push(buffers_read(&mut client, &setup, &execute).await);
        }
        read
    };
    let small = claim_buffers(4_000).await;
    let large = claim_buffers(100_000).await;
    eprintln!("filtered claim (custom, generic plan): {small:?} buffers on 4,000 messages, {large:?} on 100,000");
    for (s, l) in small.iter().zip(&large) {
        assert!(
            *l < s * 3 / 2 + 50,
            "a filtered claim read {l} buffers on 100,000 messages against {s} on 4,000"
        );
    }
}
