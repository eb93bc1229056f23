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
    /// The event body, as the JSON text stored (never re-parsed).
    pub payload: Payload,
    /// Headers carried through (trace context, ...).
    pub headers: BTreeMap<String, String>,
    /// Publication attempts so far, this one included.
    pub attempts: i32,
    /// When the producer's transaction wrote the row.
    pub created_at: DateTime<Utc>,
}

/// An event body: the JSON text of the row's `payload`, carried as it is.
///
/// The relay never parses a payload into numbers or a tree: `jsonb` holds
/// numbers no 64-bit float can (`1e400`) and any nesting depth, and
/// `serde_json::Value` refuses both (past 128 levels), so a parsed payload
/// could not be published as stored. Checking that the text is one JSON
/// value is iterative, whatever the depth.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Payload(Box<serde_json::value::RawValue>);

impl Payload {
    /// `text` if it is one JSON value.
    pub fn from_json(text: impl Into<String>) -> Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text.into()).map(Self)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parsed into a [`serde_json::Value`] (which refuses numbers beyond a
    /// 64-bit float and nesting past 128 levels): for consumers and tests.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

/// The same JSON text, or the same JSON value where both parse (`jsonb`
/// writes `{"a": 1}` where serde_json writes `{"a":1}`).
impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
            || matches!((self.to_value(), other.to_value()), (Ok(a), Ok(b)) if a == b)
    }
}

impl From<serde_json::Value> for Payload {
    fn from(v: serde_json::Value) -> Self {
        Self(serde_json::value::to_raw_value(&v).expect("a JSON value serializes"))
    }
}

impl From<&serde_json::Value> for Payload {
    fn from(v: &serde_json::Value) -> Self {
        Self(serde_json::value::to_raw_value(v).expect("a JSON value serializes"))
    }
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// Strict: text that is not UTF-8 (a `SQL_ASCII` database may hold it) is
/// an error, so that such a payload is dead-lettered rather than published
/// altered. The store reads it for showing as its `LossyPayload`.
impl<'a> tokio_postgres::types::FromSql<'a> for Payload {
    fn from_sql(
        ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        use crate::store::decode;
        let text = decode::json_text(ty, raw)?;
        let text = String::from_utf8(text).map_err(|e| decode::not_utf8(&e.utf8_error()))?;
        Ok(Self::from_json(text)?)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        crate::store::decode::is_json(ty)
    }
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
