//! The buckets behind per-aggregate order (migration 7), at SQL level:
//! fair shares between relays, the registration a claim needs, takeover
//! fencing, and the key that picks a bucket.

use crate::support;

use outbox_relay::store::{BucketSet, ClaimParams, OrderFilter, BUCKETS};
use outbox_relay::Store;
use outbox_testkit::TestSchema;
use std::collections::HashMap;
use std::time::Duration;
use support::{enqueue_rows as enqueue, of};

/// Owners of the buckets: relay id → buckets owned.
async fn owners(t: &TestSchema) -> HashMap<String, i64> {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT owner, count(*) FROM {}.relay_buckets WHERE owner IS NOT NULL GROUP BY 1",
        t.schema.quoted()
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn buckets_are_shared_fairly_between_one_two_and_three_relays() {
    let t = TestSchema::new("ord_fair").await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    let lease = Duration::from_secs(30);
    let beat = |id: &'static str, token: i64| {
        let store = store.clone();
        async move {
            store
                .relay_heartbeat(id, token, "aggregate", lease)
                .await
                .unwrap()
        }
    };
    let b = beat("r1", 1).await;
    assert!(!b.renewed, "first beat registers");
    assert_eq!(
        (b.owned.len(), b.gained.len()),
        (BUCKETS, BUCKETS),
        "alone, r1 owns all"
    );
    assert!(beat("r1", 1).await.renewed);

    // A second relay gets nothing until r1 gives back its excess.
    assert_eq!(beat("r2", 2).await.owned.len(), 0);
    assert_eq!(beat("r1", 1).await.owned.len(), 512);
    let b2 = beat("r2", 2).await;
    assert_eq!((b2.owned.len(), b2.gained.len()), (512, 512));
    assert_eq!(
        owners(&t).await,
        HashMap::from([("r1".into(), 512), ("r2".into(), 512)])
    );

    // A third: ceil(1024 / 3) = 342 each at most, all owned after a round.
    beat("r3", 3).await;
    for _ in 0..2 {
        for (id, token) in [("r1", 1), ("r2", 2), ("r3", 3)] {
            beat(id, token).await;
        }
    }
    let o = owners(&t).await;
    assert_eq!(o.values().sum::<i64>(), 1024, "{o:?}");
    assert!(o.values().all(|n| (340..=342).contains(n)), "{o:?}");
    // Repeated beats change nothing.
    beat("r1", 1).await;
    beat("r2", 2).await;
    beat("r3", 3).await;
    assert_eq!(owners(&t).await, o);

    // Two leave: the last one takes everything back.
    store.relay_leave("r2", 2).await.unwrap();
    store.relay_leave("r3", 3).await.unwrap();
    assert_eq!(beat("r1", 1).await.owned.len(), BUCKETS);
}

#[tokio::test]
async fn a_relay_whose_registration_expired_claims_nothing() {
    let t = TestSchema::new("ord_expired").await;
    enqueue(&t, &of("A", 3)).await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    let claim = |token: i64| {
        let store = store.clone();
        async move {
            store
                .claim_messages(ClaimParams {
                    limit: 10,
                    relay_id: "r1",
                    from_id: i64::MIN,
                    max_batch_bytes: i64::MAX,
                    max_message_bytes: i64::MAX,
                    ordered: Some(OrderFilter {
                        token,
                        owned: None,
                        held: &[],
                    }),
                })
                .await
                .unwrap()
        }
    };
    // Not registered at all: nothing.
    assert!(claim(7).await.messages.is_empty());
    // Registered with a short lease: another token (an earlier incarnation)
    // claims nothing, ours claims.
    store
        .relay_heartbeat("r1", 7, "aggregate", Duration::from_millis(400))
        .await
        .unwrap();
    assert!(claim(8).await.messages.is_empty());
    let c = claim(7).await;
    assert_eq!(c.messages.len(), 3, "a registered relay claims");
    // Hand it back, then let the registration expire.
    t.exec("UPDATE {schema}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL")
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        claim(7).await.messages.is_empty(),
        "an expired registration fences the claim"
    );
}

#[tokio::test]
async fn a_takeover_waits_for_the_claim_of_the_expired_relay() {
    let t = TestSchema::new("ord_fence").await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    store
        .relay_heartbeat("old", 1, "aggregate", Duration::from_millis(300))
        .await
        .unwrap();
    // A claim of "old" in progress holds its row FOR SHARE, as the claim
    // statement does while it runs.
    let mut client = t.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM {}.relays WHERE relay_id = 'old' FOR SHARE",
            t.schema.quoted()
        ),
        &[],
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let takeover = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .relay_heartbeat("new", 2, "aggregate", Duration::from_secs(30))
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !takeover.is_finished(),
        "the takeover waits for the running claim"
    );
    tx.commit().await.unwrap();
    let b = takeover.await.unwrap();
    assert_eq!(b.owned.len(), BUCKETS, "then takes every bucket");
    assert_eq!(owners(&t).await, HashMap::from([("new".into(), 1024)]));
}

#[tokio::test]
async fn the_claim_filter_reads_the_bucket_from_the_aggregate_key() {
    let t = TestSchema::new("ord_key_filter").await;
    let client = t.pool.get().await.unwrap();
    let s = t.schema.quoted();
    // Pinned: a change of hashtextextended (or of the key's text) would
    // move every aggregate to another bucket.
    for (agg_type, agg_id, key) in [
        ("order", "1", -4_305_178_962_082_394_301_i64),
        ("order", "ord-42", 8_928_155_695_810_825_411),
        ("customer", "c-7", -7_682_094_474_083_158_886),
        ("", "", 3_467_210_885_885_489_972),
    ] {
        let got: i64 = client
            .query_one(
                &format!("SELECT {s}.aggregate_key($1, $2)"),
                &[&agg_type, &agg_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, key, "aggregate_key({agg_type:?}, {agg_id:?})");
    }
    assert_eq!(BucketSet::of(-4_305_178_962_082_394_301), 835);
    assert_eq!(BucketSet::of(8_928_155_695_810_825_411), 195);

    // 3,000 aggregates of one message each, then three messages of one
    // more aggregate, held back from its second.
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
           SELECT 'x', 'order', g::text, 't', '{}' FROM generate_series(1, 3000) g",
    )
    .await;
    let held_ids = enqueue(&t, &of("held", 3)).await;
    let held_key: i64 = client
        .query_one(&format!("SELECT {s}.aggregate_key('order', 'held')"), &[])
        .await
        .unwrap()
        .get(0);
    let store = Store::new(t.pool.clone(), t.schema.clone());
    store
        .relay_heartbeat("r1", 1, "aggregate", Duration::from_secs(30))
        .await
        .unwrap();
    let claim = |owned: Option<BucketSet>, held: Vec<(i64, i64)>| {
        let store = store.clone();
        async move {
            store
                .claim_messages(ClaimParams {
                    limit: 4000,
                    relay_id: "r1",
                    from_id: i64::MIN,
                    max_batch_bytes: i64::MAX,
                    max_message_bytes: i64::MAX,
                    ordered: Some(OrderFilter {
                        token: 1,
                        owned: owned.as_ref(),
                        held: &held,
                    }),
                })
                .await
                .unwrap()
        }
    };
    let keys: HashMap<i64, i64> = client
        .query(
            &format!(
                "SELECT id, {s}.aggregate_key(aggregate_type, aggregate_id) FROM {s}.messages"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();

    // Every third bucket owned: the claim takes exactly the messages whose
    // key's low 10 bits are an owned bucket, as the relay's BucketSet
    // computes it.
    let mut owned = BucketSet::default();
    (0..BUCKETS).step_by(3).for_each(|b| owned.insert(b));
    let got = claim(Some(owned.clone()), Vec::new()).await;
    let taken: Vec<i64> = got.messages.iter().map(|m| m.id).collect();
    let mut expected: Vec<i64> = keys
        .iter()
        .filter(|(_, k)| owned.contains(BucketSet::of(**k)))
        .map(|(id, _)| *id)
        .collect();
    expected.sort_unstable();
    assert_eq!(taken, expected);
    for (id, key) in &got.keys {
        assert_eq!(keys[id], *key, "the key the claim returns for {id}");
    }
    assert!(
        (800..1200).contains(&taken.len()),
        "{} of 3003 in a third of the buckets",
        taken.len()
    );
    t.exec("UPDATE {schema}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL")
        .await;

    // No map owns every bucket; a held key lets ids up to its head through
    // and holds back nothing else.
    let got = claim(None, vec![(held_key, held_ids[1])]).await;
    let taken: Vec<i64> = got.messages.iter().map(|m| m.id).collect();
    assert_eq!(taken.len(), 3002);
    assert!(taken.contains(&held_ids[0]) && taken.contains(&held_ids[1]));
    assert!(!taken.contains(&held_ids[2]));
}

/// A claim that filters aggregates out reads a bounded number of rows: a
/// backlog of one aggregate held back (in flight, or behind a failed
/// message) costs each claim four rows per row it may take, not the whole
/// backlog, and the claim says how far it read so the floor moves on.
#[tokio::test]
async fn a_filtered_claim_reads_a_bounded_span_and_says_how_far() {
    let t = TestSchema::new("ord_scan_bound").await;
    let mut rows = of("hot", 1000);
    rows.extend(of("cold", 5));
    let ids = enqueue(&t, &rows).await;
    let store = Store::new(t.pool.clone(), t.schema.clone());
    store
        .relay_heartbeat("r1", 1, "aggregate", Duration::from_secs(30))
        .await
        .unwrap();
    let client = t.pool.get().await.unwrap();
    let hot: i64 = client
        .query_one(
            &format!("SELECT {}.aggregate_key('order', 'hot')", t.schema.quoted()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let held = [(hot, i64::MIN)];
    let claim = |from_id: i64, limit: i64, max_batch_bytes: i64| {
        let store = store.clone();
        async move {
            store
                .claim_messages(ClaimParams {
                    limit,
                    relay_id: "r1",
                    from_id,
                    max_batch_bytes,
                    max_message_bytes: i64::MAX,
                    ordered: Some(OrderFilter {
                        token: 1,
                        owned: None,
                        held: &held,
                    }),
                })
                .await
                .unwrap()
        }
    };
    // Limit 10: 40 rows read, all held back.
    let first = claim(i64::MIN, 10, i64::MAX).await;
    assert!(first.messages.is_empty());
    assert!(
        first.snapshot.is_some(),
        "an empty filtered claim has a snapshot"
    );
    assert_eq!(first.scanned_upto, Some(ids[39]));
    // From where it stopped, span after span, until the cold aggregate.
    let mut from = i64::MIN;
    let mut claims = 0;
    let got = loop {
        let c = claim(from, 10, i64::MAX).await;
        claims += 1;
        if !c.messages.is_empty() {
            break c;
        }
        from = c.scanned_upto.expect("read something") + 1;
        assert!(claims < 100, "the floor never reached the cold aggregate");
    };
    assert_eq!(claims, 1000 / 40 + 1);
    let cold: Vec<i64> = got.messages.iter().map(|m| m.id).collect();
    assert_eq!(cold, ids[1000..].to_vec());
    assert_eq!(got.scanned_upto, Some(ids[1004]), "took all it read");
    t.exec("UPDATE {schema}.messages SET status = 'pending', locked_by = NULL, locked_at = NULL")
        .await;
    // Cut short by the limit, or by the byte budget: rows it could take
    // are left above what it took, so it vouches for nothing further.
    let cut = claim(ids[1000], 2, i64::MAX).await;
    assert_eq!(cut.messages.len(), 2);
    assert_eq!(cut.scanned_upto, None);
    let cut = claim(ids[1000], 10, 1).await;
    assert_eq!(cut.messages.len(), 1, "the first row is always taken");
    assert_eq!(cut.scanned_upto, None);
}
