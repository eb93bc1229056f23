//! A claimed message, as every publisher receives it.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use uuid::Uuid;

/// One claimed outbox row: the envelope publishers carry to the broker.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Row id in `<schema>.messages`.
    pub id: i64,
    /// Deduplication key for consumers.
    pub event_id: Uuid,
    /// What happened, e.g. `order.created`.
    pub event_type: String,
    /// Payload schema version.
    pub event_version: i32,
    /// Kind of entity the event is about, e.g. `order`.
    pub aggregate_type: String,
    /// Which entity; brokers with keys use it for per-entity ordering.
    pub aggregate_id: String,
    /// Stream, subject or routing key.
    pub topic: String,
    /// The event body.
    pub payload: serde_json::Value,
    /// Headers carried through (trace context, ...).
    pub headers: BTreeMap<String, String>,
    /// Publication attempts so far, this one included.
    pub attempts: i32,
    /// When the producer's transaction wrote the row.
    pub created_at: DateTime<Utc>,
}

/// Decodes a row's `headers` column under the rule migration 6 enforces for
/// new rows: a JSON object of string values, with no name the envelope owns
/// ([`outbox::RESERVED_HEADERS`]). A row written before that rule (or with
/// its CHECK dropped) may break it; the relay then dead-letters that message
/// alone with the returned reason, rather than dropping the headers
/// silently or letting a header overwrite an envelope field.
pub(crate) fn decode_headers(v: serde_json::Value) -> Result<BTreeMap<String, String>, String> {
    use serde_json::Value;
    let map = match v {
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "headers are a JSON {}, not an object of strings",
                json_type(&other)
            ))
        }
    };
    let mut headers = BTreeMap::new();
    for (name, value) in map {
        if let Some(reason) = outbox::reserved_header(&name) {
            return Err(format!("header {name:?} is reserved ({reason})"));
        }
        match value {
            Value::String(s) => {
                headers.insert(name, s);
            }
            other => {
                return Err(format!(
                    "header {name:?} is a JSON {}, not a string",
                    json_type(&other)
                ))
            }
        }
    }
    Ok(headers)
}

fn json_type(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_decode_only_as_an_object_of_unreserved_strings() {
        let ok = decode_headers(json!({"traceparent": "00-x", "Source": "crm"})).unwrap();
        assert_eq!(ok.len(), 2);
        for (bad, why) in [
            (json!([1]), "headers are a JSON array"),
            (json!("x"), "headers are a JSON string"),
            (json!(null), "headers are a JSON null"),
            (json!({"n": 1}), "header \"n\" is a JSON number"),
            (json!({"o": {}}), "header \"o\" is a JSON object"),
            (json!({"data": "x"}), "header \"data\" is reserved"),
            (json!({"ce_id": "x"}), "header \"ce_id\" is reserved"),
        ] {
            let err = decode_headers(bad).unwrap_err();
            assert!(err.starts_with(why), "{err}");
        }
    }
}
