//! The claim floor on the real PostgreSQL: claims start past the rows
//! already dealt with, yet a row committed late below the floor, or put back
//! below it by someone else, is still claimed.

use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::{Relay, RelayConfig, RetryPolicy, Store};
use outbox_testkit::TestSchema;
use std::time::Duration;

fn relay(t: &TestSchema, sweep_interval: Duration) -> Relay<PostgresPublisher> {
    relay_with(
        t,
        RelayConfig {
            sweep_interval,
            ..RelayConfig::default()
        },
    )
}

fn relay_with(t: &TestSchema, config: RelayConfig) -> Relay<PostgresPublisher> {
    let config = RelayConfig {
        relay_id: "floor".into(),
        batch_size: 10,
        ..config
    };
    let publisher = PostgresPublisher::new(t.pool.clone(), &t.schema, "r");
    Relay::new(
        Store::new(t.pool.clone(), t.schema.clone()),
        publisher,
        config,
    )
    .unwrap()
}

/// `n` rows, each of an aggregate of its own (these tests are about the
/// floor, not about order within an aggregate).
async fn commit_rows(t: &TestSchema, topic: &str, n: usize) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', '{topic}-' || g || '-' || gen_random_uuid(), '{topic}', '{{}}' \
           FROM generate_series(1, {n}) g"
    ))
    .await;
}

/// The row a test's transaction inserts and holds open: `RETURNING id`.
fn insert_late(t: &TestSchema) -> String {
    format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('e', 'a', 'late', 'late', '{{}}') RETURNING id",
        t.schema.quoted()
    )
}

/// Aggregate `held`: its head failed and is due in an hour.
async fn fail_held_head(t: &TestSchema) {
    t.exec(
        "INSERT INTO {schema}.messages \
           (event_type, aggregate_type, aggregate_id, topic, payload, status, attempts, next_run_at) \
         VALUES ('e', 'a', 'held', 'held', '{}', 'failed', 1, now() + interval '1 hour')",
    )
    .await;
}

/// `n` rows of aggregate `held`, behind its failed head: spans of 40 live
/// rows (batch 10 × 4) that the claims read and take nothing of.
async fn held_rows(t: &TestSchema, n: usize) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'e', 'a', 'held', 'held', '{{}}' FROM generate_series(1, {n})"
    ))
    .await;
}

/// Whether row `id` has been sent.
async fn was_sent(t: &TestSchema, id: i64) -> bool {
    t.count(&format!(
        "SELECT count(*) FROM {{schema}}.messages_sent WHERE id = {id}"
    ))
    .await
        == 1
}

/// A transaction takes an id behind a failed head and stays open while 100
/// rows of the head's aggregate commit after it; a claim reads them all and
/// takes nothing (the pass begins); `stream_rounds` rounds of 5 new rows,
/// each claimed, go by; then it commits. Returns the late row's id.
async fn late_row_in_a_held_span(
    t: &TestSchema,
    r: &Relay<PostgresPublisher>,
    stream_rounds: usize,
) -> i64 {
    fail_held_head(t).await;
    let mut late = t.pool.get().await.unwrap();
    let tx = late.transaction().await.unwrap();
    let late_id: i64 = tx.query_one(&insert_late(t), &[]).await.unwrap().get(0);
    held_rows(t, 100).await;
    assert_eq!(r.run_once().await.unwrap().marked_sent, 0, "all held back");
    for _ in 0..stream_rounds {
        commit_rows(t, "stream", 5).await;
        r.run_once().await.unwrap();
    }
    tx.commit().await.unwrap();
    late_id
}

/// The case the floor exists to get right: a transaction takes its id,
/// later ids commit and are claimed, and only then does it commit. No
/// sweep can help here (one per hour): the floor itself must have waited.
#[tokio::test]
async fn a_row_committed_after_later_ids_were_claimed_is_still_claimed() {
    let t = TestSchema::new("floor_late_commit").await;
    let r = relay(&t, Duration::from_secs(3600));
    let mut late = t.pool.get().await.unwrap();
    let tx = late.transaction().await.unwrap();
    let late_id: i64 = tx.query_one(&insert_late(&t), &[]).await.unwrap().get(0);
    // Batches above it, each claimed while it is still open: every claim
    // gives the floor a chance to move, and it must not pass `late_id`.
    for round in 0..4 {
        commit_rows(&t, "early", 10).await;
        let stats = r.run_once().await.unwrap();
        assert_eq!(stats.marked_sent, 10, "round {round}");
    }
    tx.commit().await.unwrap();
    commit_rows(&t, "after", 5).await;
    let stats = r.run_once().await.unwrap();
    assert_eq!(stats.marked_sent, 6, "the late row and the five after it");
    assert!(was_sent(&t, late_id).await);
}

/// A late commit in a span that a pass went past: every row the claim read
/// there was held back (behind a failed head), so it took nothing and the
/// next claims read on past the span. The late row is claimed once the
/// pass ends and a claim reads from the floor again, not at the next sweep
/// (one per hour here): claims of the pass, which read above it, must not
/// move the floor past it.
#[tokio::test]
async fn a_row_committed_late_in_a_span_held_back_is_claimed_when_the_pass_ends() {
    let t = TestSchema::new("floor_late_in_pass").await;
    let r = relay(&t, Duration::from_secs(3600));
    let late_id = late_row_in_a_held_span(&t, &r, 0).await;
    let mut sent = 0;
    for _ in 0..20 {
        sent += r.run_once().await.unwrap().marked_sent;
        if sent > 0 {
            break;
        }
    }
    assert_eq!(
        sent, 1,
        "the late row, once the pass has read on to the end"
    );
    assert!(was_sent(&t, late_id).await);
}

/// As above, in a steady stream: every claim of the pass takes new rows,
/// so no claim ever reads nothing more and the pass never ends. Once the
/// transactions that were running when it began have ended (and at most
/// every 50 ms), one claim looks back from the floor: the late row goes out
/// while the stream still flows, not at the next sweep (once an hour here;
/// 5 s by default, the latency tail measured before).
#[tokio::test]
async fn a_row_committed_late_in_a_span_held_back_is_claimed_while_a_stream_flows() {
    let t = TestSchema::new("floor_late_in_stream").await;
    let r = relay(&t, Duration::from_secs(3600));
    let late_id = late_row_in_a_held_span(&t, &r, 2).await;
    // Every claim after its commit takes rows of the stream.
    let mut late_sent = None;
    for round in 2..30 {
        // A message every 2 ms or so.
        tokio::time::sleep(Duration::from_millis(10)).await;
        commit_rows(&t, "stream", 5).await;
        let stats = r.run_once().await.unwrap();
        assert!(
            stats.claimed > 0,
            "round {round}: the stream keeps every claim busy"
        );
        if was_sent(&t, late_id).await {
            late_sent = Some(round);
            break;
        }
    }
    assert!(
        late_sent.is_some(),
        "the late row was not claimed in 28 claims of a steady stream"
    );
}

/// A row that goes back to pending below the floor without this relay
/// knowing (another relay's release, an operator's replay) is found by the
/// next sweep from id 0.
#[tokio::test]
async fn a_row_put_back_below_the_floor_is_found_by_the_sweep() {
    let t = TestSchema::new("floor_sweep").await;
    let r = relay(&t, Duration::from_millis(300));
    for _ in 0..4 {
        commit_rows(&t, "early", 10).await;
        assert_eq!(r.run_once().await.unwrap().marked_sent, 10);
    }
    // As if another relay had claimed the first row and released it: a
    // pending row with the lowest id of all.
    t.exec(
        "INSERT INTO {schema}.messages (id, event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES (-1, 'e', 'a', 'back', 'back', '{}')",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut found = 0;
    while found == 0 && std::time::Instant::now() < deadline {
        found = r.run_once().await.unwrap().marked_sent;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found, 1);
    assert!(was_sent(&t, -1).await);
}

/// The same behind a long backlog held back at the first ids (a failed
/// head, 300 rows of its aggregate behind it: eight spans). The sweep reads
/// them span by span and must go on up to the floor, however quickly the
/// transactions it began under end (a pass ends on that only above the
/// floor).
#[tokio::test]
async fn a_sweep_finds_a_row_put_back_behind_a_long_backlog_held_back() {
    let t = TestSchema::new("floor_sweep_held").await;
    let r = relay(&t, Duration::from_millis(300));
    fail_held_head(&t).await;
    held_rows(&t, 300).await;
    commit_rows(&t, "early", 40).await;
    // The first of them is another relay's, in flight: this relay passes it.
    let other: i64 = t
        .count(
            "WITH o AS (SELECT min(id) AS id FROM {schema}.messages WHERE topic = 'early') \
             UPDATE {schema}.messages m SET status = 'processing', attempts = 1, \
                    locked_by = 'other', locked_at = now() \
               FROM o WHERE m.id = o.id RETURNING m.id",
        )
        .await;
    let mut sent = 0;
    for _ in 0..100 {
        sent += r.run_once().await.unwrap().marked_sent;
        if sent == 39 {
            break;
        }
    }
    assert_eq!(sent, 39, "every early row but the other relay's");
    // The other relay releases it (shutting down): pending again, below
    // this relay's floor.
    t.exec(&format!(
        "UPDATE {{schema}}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL \
          WHERE id = {other}"
    ))
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut found = 0;
    while found == 0 && std::time::Instant::now() < deadline {
        found = r.run_once().await.unwrap().marked_sent;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(found, 1, "the row put back was not found by a sweep in 5 s");
    assert!(was_sent(&t, other).await);
}

/// Rows the reaper recovers are claimable once their backoff is over (here
/// none), not at the next sweep.
#[tokio::test]
async fn rows_the_reaper_recovers_are_claimed_without_waiting_for_a_sweep() {
    let t = TestSchema::new("floor_reaped").await;
    let r = relay_with(
        &t,
        RelayConfig {
            sweep_interval: Duration::from_secs(3600),
            retry: RetryPolicy {
                schedule: vec![Duration::ZERO],
                ..RetryPolicy::default()
            },
            ..RelayConfig::default()
        },
    );
    commit_rows(&t, "t", 10).await;
    // Claimed by a relay that died: its lease is long expired.
    t.exec(
        "UPDATE {schema}.messages SET status = 'processing', attempts = 1, locked_by = 'dead', \
           locked_at = now() - interval '1 day'",
    )
    .await;
    for _ in 0..4 {
        commit_rows(&t, "later", 10).await;
        assert_eq!(r.run_once().await.unwrap().marked_sent, 10);
    }
    assert_eq!(r.reap().await.unwrap(), 10);
    assert_eq!(r.run_once().await.unwrap().marked_sent, 10);
}
