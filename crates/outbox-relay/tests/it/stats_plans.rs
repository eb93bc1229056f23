//! The gauges every relay refreshes every few seconds, `outbox stats`'s
//! oldest-pending age and the operator page's snapshot read the hot table
//! through plans that stay cheap as it grows: checked on the real planner
//! with EXPLAIN, over a table large enough for the planner to care.

use outbox_relay::store::statement_for_tests;
use outbox_relay::Store;
use outbox_testkit::TestSchema;

/// `(node type, relation, index)` of every scan in a plan.
fn scans(plan: &serde_json::Value, out: &mut Vec<(String, String, String)>) {
    let s = |k: &str| plan[k].as_str().unwrap_or_default().to_owned();
    if plan.get("Relation Name").is_some() {
        out.push((s("Node Type"), s("Relation Name"), s("Index Name")));
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        scans(child, out);
    }
}

async fn plan_of(t: &TestSchema, sql: &str) -> Vec<(String, String, String)> {
    let client = t.pool.get().await.unwrap();
    let plan: serde_json::Value = client
        .query_one(&format!("EXPLAIN (FORMAT JSON) {sql}"), &[])
        .await
        .unwrap()
        .get(0);
    let mut out = Vec::new();
    scans(&plan[0]["Plan"], &mut out);
    out
}

#[tokio::test]
async fn backlog_gauges_scan_the_hot_table_once_and_count_dead_rows_from_their_index() {
    let t = TestSchema::new("relay_stats_plans").await;
    // 50,000 unsent rows, 200 of them dead, as a busy outbox holds.
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status, dead_at) \
           SELECT 'x', 'a', g::text, 't', '{}', \
                  CASE WHEN g % 250 = 0 THEN 'dead' WHEN g % 7 = 0 THEN 'failed' ELSE 'pending' END, \
                  CASE WHEN g % 250 = 0 THEN now() END \
           FROM generate_series(1, 50000) g; \
         ANALYZE {schema}.messages;",
    )
    .await;
    let backlog = statement_for_tests(&t.schema, "stats.backlog").unwrap();
    let scans = plan_of(&t, &backlog).await;
    let of_messages: Vec<_> = scans.iter().filter(|s| s.1 == "messages").collect();
    let whole: Vec<_> = of_messages
        .iter()
        .filter(|s| s.0 == "Seq Scan" || s.2 == "messages_claimable_idx")
        .collect();
    assert_eq!(whole.len(), 1, "one pass over the live rows: {scans:?}");
    assert!(
        of_messages
            .iter()
            .any(|s| s.2 == "messages_dead_idx" && s.0.contains("Index")),
        "dead rows counted from their index: {scans:?}"
    );
    assert_eq!(of_messages.len(), 2, "{scans:?}");

    // And the counts are right, including a row written `dead` by hand
    // without a dead_at (before migration 10, whose CHECK refuses it now).
    t.exec(
        "ALTER TABLE {schema}.messages DROP CONSTRAINT messages_state_valid; \
         INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status) \
         VALUES ('x', 'a', 'hand', 't', '{}', 'dead')",
    )
    .await;
    let b = Store::new(t.pool.clone(), t.schema.clone())
        .count_backlog()
        .await
        .unwrap();
    let failed = (1..=50_000).filter(|g| g % 250 != 0 && g % 7 == 0).count() as i64;
    assert_eq!(b.dead, 201, "{b:?}");
    assert_eq!(b.failed, failed, "{b:?}");
    assert_eq!(b.pending, 50_000 - 200 - failed, "{b:?}");
    assert_eq!(b.processing, 0, "{b:?}");
}

#[tokio::test]
async fn the_oldest_pending_age_reads_the_claimable_index_from_its_start() {
    let t = TestSchema::new("relay_stats_oldest").await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
           SELECT 'x', 'a', g::text, 't', '{}' FROM generate_series(1, 50000) g; \
         ANALYZE {schema}.messages;",
    )
    .await;
    let sql = statement_for_tests(&t.schema, "stats.oldest_pending_age")
        .unwrap()
        .replace("$1", "NULL::text");
    let scans = plan_of(&t, &sql).await;
    assert_eq!(
        scans,
        vec![(
            "Index Scan".to_owned(),
            "messages".to_owned(),
            "messages_claimable_idx".to_owned()
        )],
        "no sort, no scan of the backlog"
    );
}

/// The operator page's snapshot: one pass over the hot table for every
/// count, the sent table not read at all, and the newest dead letters a
/// backward walk of the dead index that stops at the limit.
#[tokio::test]
async fn the_operator_page_counts_in_one_pass_and_lists_dead_letters_from_their_index() {
    let t = TestSchema::new("relay_stats_ui").await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload, status, dead_at) \
           SELECT 'x', 'a', g::text, 't' || g % 10, '{}', \
                  CASE WHEN g % 50 = 0 THEN 'dead' ELSE 'pending' END, \
                  CASE WHEN g % 50 = 0 THEN now() - g * interval '1 s' END \
           FROM generate_series(1, 50000) g; \
         INSERT INTO {schema}.messages_sent SELECT id, event_id, event_type, event_version, \
           aggregate_type, aggregate_id, topic, payload, headers, 'sent', attempts, next_run_at, \
           NULL, NULL, NULL, NULL, NULL, created_at, now() FROM {schema}.messages LIMIT 20000; \
         ANALYZE {schema}.messages; ANALYZE {schema}.messages_sent;",
    )
    .await;
    let hot = statement_for_tests(&t.schema, "ui.hot_counts").unwrap();
    let scans_of_hot = plan_of(&t, &hot).await;
    assert_eq!(
        scans_of_hot,
        vec![("Seq Scan".to_owned(), "messages".to_owned(), String::new())],
        "one pass over the hot table"
    );
    let sent = statement_for_tests(&t.schema, "ui.sent_counters").unwrap();
    let scans_of_sent = plan_of(&t, &sent).await;
    assert!(
        scans_of_sent.iter().all(|s| s.1 != "messages_sent"),
        "the sent table is not read: {scans_of_sent:?}"
    );
    let newest = statement_for_tests(&t.schema, "dead.newest")
        .unwrap()
        .replace("$1", "NULL::text")
        .replace("$2", "NULL::text")
        .replace("$3", "50");
    let scans_of_dead = plan_of(&t, &newest).await;
    assert_eq!(
        scans_of_dead,
        vec![(
            "Index Scan".to_owned(),
            "messages".to_owned(),
            "messages_dead_idx".to_owned()
        )],
        "no sort, no scan of the backlog"
    );
}
