//! The order oracle of docs/design/ordering.md §4.5 and §5: what every
//! ordering test asserts, on the outbox tables and on what a destination
//! received.
//!
//! * [`first_deliveries_out_of_order`]: per aggregate, the first delivery
//!   of each message must come in id order (duplicates from crashes or
//!   takeovers may repeat a message, but never bring one before its
//!   predecessor's first delivery).
//! * [`sent_order_violations`]: on `messages_sent`, for consecutive sent
//!   ids k < k' of one aggregate, k' was claimed in the same batch as k
//!   (same `locked_by` and `locked_at`) or its final claim started after
//!   k was settled sent. The claim stamps `locked_at` with the claim
//!   statement's `now()` and the settle stamps `sent_at` with its own: a
//!   claim that started after the settle started cannot have been the one
//!   that saw k live, so a pair that fails the test was published while k
//!   was still live.

use crate::TestSchema;
use std::collections::HashMap;
use std::hash::Hash;

/// The aggregates whose first deliveries are not in id order, given every
/// delivery `(aggregate, message id)` in the order the destination got
/// them (repeats allowed). Empty when order held.
pub fn first_deliveries_out_of_order<A: Eq + Hash + Clone + Ord>(
    deliveries: &[(A, i64)],
) -> Vec<A> {
    let mut seen: HashMap<&A, (i64, std::collections::HashSet<i64>)> = HashMap::new();
    let mut bad = std::collections::BTreeSet::new();
    for (agg, id) in deliveries {
        let (highest, ids) = seen
            .entry(agg)
            .or_insert_with(|| (i64::MIN, Default::default()));
        if !ids.insert(*id) {
            continue; // a duplicate: only first deliveries count
        }
        if *id < *highest {
            bad.insert(agg.clone());
        }
        *highest = (*highest).max(*id);
    }
    bad.into_iter().collect()
}

/// The §4.5 check on the sent messages: pairs of consecutive sent messages
/// of one aggregate where the later one was published while the earlier
/// one was still live. 0 when order held.
pub async fn sent_order_violations(t: &TestSchema) -> i64 {
    t.count(
        "WITH s AS ( \
           SELECT id, locked_by, locked_at, sent_at, \
                  lag(id) OVER w AS prev_id, lag(locked_by) OVER w AS prev_by, \
                  lag(locked_at) OVER w AS prev_at, lag(sent_at) OVER w AS prev_sent \
             FROM {schema}.all_messages WHERE status = 'sent' \
           WINDOW w AS (PARTITION BY aggregate_type, aggregate_id ORDER BY id)) \
         SELECT count(*) FROM s \
          WHERE prev_id IS NOT NULL \
            AND NOT (locked_by IS NOT DISTINCT FROM prev_by AND locked_at = prev_at) \
            AND NOT (locked_at > prev_sent)",
    )
    .await
}

/// Messages not yet sent or dead.
pub async fn live_messages(t: &TestSchema) -> i64 {
    t.count("SELECT count(*) FROM {schema}.all_messages WHERE status NOT IN ('sent', 'dead')")
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_deliveries_ignore_duplicates_and_catch_overtaking() {
        let ok = [("a", 1), ("b", 5), ("a", 2), ("a", 1), ("b", 6), ("a", 3)];
        assert!(first_deliveries_out_of_order(&ok).is_empty());
        let bad = [("a", 1), ("a", 3), ("b", 5), ("a", 2), ("b", 6)];
        assert_eq!(first_deliveries_out_of_order(&bad), vec!["a"]);
        // A resend of an earlier message after a later one is a duplicate,
        // not a violation; a first delivery of it would be.
        let dup = [("a", 1), ("a", 2), ("a", 1)];
        assert!(first_deliveries_out_of_order(&dup).is_empty());
    }
}
