//! Shared by the publisher tests: sample messages and the checks every
//! broker's read-back must pass. Kept free of any one broker so a
//! conformance harness can call it.

#![allow(dead_code)]

use chrono::{SubsecRound, Utc};
use outbox_relay::{Message, Outcome};
use serde_json::json;

/// A random suffix for exchange, queue and topic names.
pub fn suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// `n` messages on `topic` with every envelope field set, including a
/// header that is a CloudEvents extension name and one that is not, and a
/// payload with nesting and non-ASCII text.
pub fn messages(n: usize, topic: &str) -> Vec<Message> {
    let base = rand::random::<u32>() as i64;
    (0..n)
        .map(|i| Message {
            id: base + i as i64,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".into(),
            event_version: 3,
            aggregate_type: "order".into(),
            aggregate_id: format!("ord-{i}"),
            topic: topic.into(),
            payload: json!({"order_id": i, "total": 1999, "note": "naïve café ✓", "lines": [{"sku": "a", "qty": 2}]}),
            headers: [
                ("traceparent".to_owned(), format!("00-{:032x}-{:016x}-01", i + 1, i + 1)),
                ("X-Tenant".to_owned(), "acme".to_owned()),
            ]
            .into(),
            attempts: 1,
            created_at: Utc::now().trunc_subsecs(6),
        })
        .collect()
}

/// Panics unless every outcome is `Ok`.
pub fn assert_all_ok(outcomes: &[Outcome]) {
    for (i, o) in outcomes.iter().enumerate() {
        assert!(o.is_ok(), "message {i}: {o:?}");
    }
}

/// The message whose event_id is `id`.
pub fn by_event_id<'a>(batch: &'a [Message], id: &str) -> &'a Message {
    batch
        .iter()
        .find(|m| m.event_id.to_string() == id)
        .unwrap_or_else(|| panic!("no message with event_id {id}"))
}
