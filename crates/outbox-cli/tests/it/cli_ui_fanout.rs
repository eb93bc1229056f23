//! `outbox ui` with many viewers: one count per interval, whoever watches,
//! measured on the database's own statistics.

use crate::common;

use common::ui::{sse_events, start};
use outbox_testkit::TestSchema;
use std::time::{Duration, Instant};

/// Scans of the schema's hot table so far (sequential and index), as the
/// statistics collector counts them: a database-side count of what the
/// page's queries cost, whoever sent them.
async fn scans(t: &TestSchema) -> i64 {
    let c = t.pool.get().await.unwrap();
    c.execute("SELECT pg_stat_clear_snapshot()", &[])
        .await
        .unwrap();
    c.query_one(
        "SELECT (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::int8 \
           FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'messages'",
        &[&t.name()],
    )
    .await
    .unwrap()
    .get(0)
}

/// Runs the page for `how_long` with `clients` SSE clients; returns each
/// client's snapshot numbers and the hot-table scans the run cost.
async fn watch_with(t: &TestSchema, clients: usize, how_long: Duration) -> (Vec<Vec<u64>>, i64) {
    let before = scans(t).await;
    let (ui, port) = start(t, &["--interval", "1s"], None);
    let tasks: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(sse_events(port, usize::MAX, how_long)))
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.push(task.await.unwrap().into_iter().map(|(s, _)| s).collect());
    }
    // Ending the process ends its connections; each backend flushes its
    // statistics as it exits. Wait until none is left.
    std::process::Command::new("kill")
        .args(["-TERM", &ui.0.id().to_string()])
        .status()
        .unwrap();
    drop(ui);
    settle(t).await;
    (seqs, scans(t).await - before)
}

/// Waits until no other session's last statement named the schema: each
/// has ended, and flushed its statistics as it did.
async fn settle(t: &TestSchema) {
    let c = t.pool.get().await.unwrap();
    let pattern = format!("%{}%", t.name());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                  WHERE pid <> pg_backend_pid() AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sessions on the schema stay open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn fifty_viewers_cost_the_database_what_one_does() {
    // Created and seeded on a connection of its own, closed before measuring,
    // so no scan of the setup is counted late (a session flushes its
    // statistics when it ends, or up to 10 s after its last statement).
    let t = TestSchema::unmigrated("cli_ui_fanout").await;
    {
        let (client, conn) =
            tokio_postgres::connect(&outbox_testkit::database_url(), tokio_postgres::NoTls)
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        outbox::migrate(&client, &t.schema).await.unwrap();
        let q = t.schema.quoted();
        client
            .batch_execute(&format!(
                "INSERT INTO {q}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                   SELECT 'e', 'a', i::text, 'orders', '{{}}' FROM generate_series(1, 20) i; \
                 INSERT INTO {q}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
                   status, attempts, dead_at, dead_reason) \
                   VALUES ('e', 'a', 'x', 'orders', '{{}}', 'dead', 3, now(), 'no')"
            ))
            .await
            .unwrap();
        drop(client);
        conn.await.unwrap().unwrap();
    }
    settle(&t).await;
    let how_long = Duration::from_secs(5);
    let (one, one_scans) = watch_with(&t, 1, how_long).await;
    let (fifty, fifty_scans) = watch_with(&t, 50, how_long).await;
    eprintln!(
        "hot-table scans in {how_long:?} at a 1 s interval: 1 viewer {one_scans}, \
         50 viewers {fifty_scans}; snapshots seen: {:?} / {:?}",
        one[0], fifty[0]
    );
    // Every viewer sees the same snapshots: one count, fanned out.
    let first = &fifty[0];
    assert!(first.len() >= 3, "too few snapshots: {first:?}");
    for (i, s) in fifty.iter().enumerate() {
        let common: Vec<&u64> = s.iter().filter(|x| first.contains(x)).collect();
        assert!(
            common.len() + 1 >= s.len().min(first.len()),
            "viewer {i}: {s:?} vs {first:?}"
        );
    }
    // At most one count per interval (plus the first, at once).
    let max_snapshots = how_long.as_secs() + 2;
    let seen = fifty.iter().flatten().max().unwrap() - fifty.iter().flatten().min().unwrap() + 1;
    assert!(seen <= max_snapshots, "{seen} snapshots in {how_long:?}");
    // And the database agrees: fifty viewers cost what one does, within
    // one snapshot's scans (the two runs' windows differ by a tick).
    let per_snapshot = one_scans as f64 / one[0].len().max(1) as f64;
    assert!(
        (fifty_scans as f64) <= one_scans as f64 + 2.0 * per_snapshot,
        "50 viewers: {fifty_scans} scans, 1 viewer: {one_scans}"
    );
    // Each snapshot scans the hot table a fixed few times, whoever watches.
    let snapshots = fifty.iter().flatten().max().unwrap();
    assert!(
        fifty_scans as u64 <= 3 * snapshots,
        "{fifty_scans} scans for {snapshots} snapshots"
    );
}
