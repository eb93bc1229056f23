//! One envelope for every publisher: the message's identity and metadata
//! travel with the payload, whatever the transport.
//!
//! - [`Envelope`] is the native JSON form (`{"event_id": …, "payload": …}`),
//!   used as the body where a transport has no headers (Redis fields carry
//!   the same names; asynq tasks carry the whole JSON).
//! - [`Envelope::to_cloudevent`] is the CloudEvents 1.0 structured mode
//!   (HTTP webhooks, `application/cloudevents+json`).
//! - [`Envelope::binary_headers`] is CloudEvents binary mode: `ce-*`
//!   attributes as transport headers, the payload alone as the body
//!   (AMQP, NATS, Kafka, MQTT v5).

use crate::Message;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// CloudEvents `source` used unless a publisher is configured otherwise.
pub const DEFAULT_SOURCE: &str = "/outbox";

/// The envelope every publisher carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Deduplication key.
    pub event_id: Uuid,
    /// The outbox row id (stable across retries of the same message).
    pub message_id: i64,
    /// What happened.
    pub event_type: String,
    /// Payload schema version.
    pub event_version: i32,
    /// Kind of entity.
    pub aggregate_type: String,
    /// Which entity.
    pub aggregate_id: String,
    /// Stream, subject or routing key.
    pub topic: String,
    /// Headers (trace context, ...).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The event body, its JSON text as stored.
    pub payload: crate::Payload,
    /// When the producer's transaction wrote it.
    pub created_at: DateTime<Utc>,
}

impl From<&Message> for Envelope {
    fn from(m: &Message) -> Self {
        Self {
            event_id: m.event_id,
            message_id: m.id,
            event_type: m.event_type.clone(),
            event_version: m.event_version,
            aggregate_type: m.aggregate_type.clone(),
            aggregate_id: m.aggregate_id.clone(),
            topic: m.topic.clone(),
            headers: m.headers.clone(),
            payload: m.payload.clone(),
            created_at: m.created_at,
        }
    }
}

/// Metadata names carried as transport headers next to the payload, and as
/// Redis stream fields.
pub mod field {
    /// `event_id`.
    pub const EVENT_ID: &str = "event_id";
    /// `message_id`.
    pub const MESSAGE_ID: &str = "message_id";
    /// `event_type`.
    pub const EVENT_TYPE: &str = "event_type";
    /// `event_version`.
    pub const EVENT_VERSION: &str = "event_version";
    /// `aggregate_type`.
    pub const AGGREGATE_TYPE: &str = "aggregate_type";
    /// `aggregate_id`.
    pub const AGGREGATE_ID: &str = "aggregate_id";
    /// `topic`.
    pub const TOPIC: &str = "topic";
    /// `created_at` (RFC 3339).
    pub const CREATED_AT: &str = "created_at";
    /// `headers` (a JSON object, where a transport has no headers of its own).
    pub const HEADERS: &str = "headers";
    /// `payload` (JSON text).
    pub const PAYLOAD: &str = "payload";
}

impl Envelope {
    /// Native JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an envelope always serializes")
    }

    /// Parses native JSON text (what consumers of header-less transports read).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Rebuilds an envelope from `(name, value)` text pairs named as in
    /// [`field`]: the metadata, `headers` (a JSON object) and `payload`
    /// (JSON text). What consumers of Redis stream entries, or of NATS and
    /// Kafka headers plus the body as `payload`, call. Other names are ignored.
    pub fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, serde_json::Error> {
        use serde_json::Value;
        let mut object = serde_json::Map::new();
        for (name, value) in fields {
            let value = match name {
                field::MESSAGE_ID | field::EVENT_VERSION => Value::Number(
                    value
                        .parse::<i64>()
                        .map_err(serde::de::Error::custom)?
                        .into(),
                ),
                field::HEADERS | field::PAYLOAD => serde_json::from_str(value)?,
                field::EVENT_ID
                | field::EVENT_TYPE
                | field::AGGREGATE_TYPE
                | field::AGGREGATE_ID
                | field::TOPIC
                | field::CREATED_AT => Value::String(value.to_owned()),
                _ => continue,
            };
            object.insert(name.to_owned(), value);
        }
        serde_json::from_value(Value::Object(object))
    }

    /// The metadata as `(name, value)` pairs, without payload and headers.
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        vec![
            (field::EVENT_ID, self.event_id.to_string()),
            (field::MESSAGE_ID, self.message_id.to_string()),
            (field::EVENT_TYPE, self.event_type.clone()),
            (field::EVENT_VERSION, self.event_version.to_string()),
            (field::AGGREGATE_TYPE, self.aggregate_type.clone()),
            (field::AGGREGATE_ID, self.aggregate_id.clone()),
            (field::TOPIC, self.topic.clone()),
            (field::CREATED_AT, self.created_at.to_rfc3339()),
        ]
    }

    /// CloudEvents 1.0, structured mode, as JSON text. The outbox metadata
    /// CloudEvents has no attribute for travels as extensions
    /// (`eventversion`, `aggregatetype`, `outboxid`, `topic`); headers whose
    /// names are valid extension names (`traceparent`, `tracestate`, ...)
    /// become extensions too, the rest are kept under the `outboxheaders`
    /// extension as JSON text. `data` is the payload's text as stored: a
    /// `serde_json::Value` could not hold every payload (`1e400`, nesting
    /// past 128 levels).
    pub fn to_cloudevent(&self, source: &str) -> String {
        #[derive(Serialize)]
        struct Structured<'a> {
            #[serde(flatten)]
            attributes: BTreeMap<String, String>,
            datacontenttype: &'static str,
            data: &'a crate::Payload,
        }
        serde_json::to_string(&Structured {
            attributes: self.cloudevent_attributes(source).into_iter().collect(),
            datacontenttype: "application/json",
            data: &self.payload,
        })
        .expect("strings and a JSON text serialize")
    }

    /// CloudEvents 1.0, binary mode: `ce-<attribute>` headers; the body is
    /// the payload's JSON with `content-type: application/json`.
    pub fn binary_headers(&self, source: &str) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = self
            .cloudevent_attributes(source)
            .into_iter()
            .map(|(k, v)| (format!("ce-{k}"), v))
            .collect();
        h.push(("content-type".into(), "application/json".into()));
        h
    }

    fn cloudevent_attributes(&self, source: &str) -> Vec<(String, String)> {
        let mut a = vec![
            ("specversion".to_owned(), "1.0".to_owned()),
            ("id".to_owned(), self.event_id.to_string()),
            ("source".to_owned(), source.to_owned()),
            ("type".to_owned(), self.event_type.clone()),
            ("subject".to_owned(), self.aggregate_id.clone()),
            ("time".to_owned(), self.created_at.to_rfc3339()),
            ("eventversion".to_owned(), self.event_version.to_string()),
            ("aggregatetype".to_owned(), self.aggregate_type.clone()),
            ("outboxid".to_owned(), self.message_id.to_string()),
            ("topic".to_owned(), self.topic.clone()),
        ];
        let mut other = BTreeMap::new();
        for (k, v) in &self.headers {
            if is_extension_name(k) && !a.iter().any(|(n, _)| n == k) {
                a.push((k.clone(), v.clone()));
            } else {
                other.insert(k.clone(), v.clone());
            }
        }
        if !other.is_empty() {
            a.push((
                "outboxheaders".to_owned(),
                serde_json::to_string(&other).expect("string map serializes"),
            ));
        }
        a
    }
}

/// CloudEvents extension names: lowercase ASCII letters and digits, at most 20.
fn is_extension_name(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 20
        && k.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope() -> Envelope {
        Envelope {
            event_id: Uuid::now_v7(),
            message_id: 7,
            event_type: "order.created".into(),
            event_version: 2,
            aggregate_type: "order".into(),
            aggregate_id: "42".into(),
            topic: "orders".into(),
            headers: [
                ("traceparent".to_owned(), "00-abc-def-01".to_owned()),
                ("X-Tenant".to_owned(), "acme".to_owned()),
            ]
            .into(),
            payload: json!({"total": 1999}).into(),
            created_at: Utc::now(),
        }
    }

    #[test]
    fn native_json_round_trips() {
        let e = envelope();
        assert_eq!(Envelope::from_json(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn fields_round_trip() {
        let e = envelope();
        let mut fields = e.metadata();
        fields.push((field::HEADERS, serde_json::to_string(&e.headers).unwrap()));
        fields.push((field::PAYLOAD, e.payload.get().to_owned()));
        fields.push(("unrelated", "x".to_owned()));
        let back = Envelope::from_fields(fields.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn structured_cloudevent_carries_everything() {
        let e = envelope();
        let ce: serde_json::Value = serde_json::from_str(&e.to_cloudevent(DEFAULT_SOURCE)).unwrap();
        assert_eq!(ce["specversion"], "1.0");
        assert_eq!(ce["id"], e.event_id.to_string());
        assert_eq!(ce["type"], "order.created");
        assert_eq!(ce["subject"], "42");
        assert_eq!(ce["eventversion"], "2");
        assert_eq!(ce["traceparent"], "00-abc-def-01");
        assert_eq!(ce["outboxheaders"], r#"{"X-Tenant":"acme"}"#);
        assert_eq!(ce["data"], json!({"total": 1999}));
    }

    /// Every name the envelope writes next to the headers is one the
    /// library refuses as a header name, so no header can collide with it.
    #[test]
    fn reserved_header_names_cover_every_envelope_name() {
        let mut e = envelope();
        e.headers.clear();
        let ce: serde_json::Value = serde_json::from_str(&e.to_cloudevent(DEFAULT_SOURCE)).unwrap();
        let mut names: Vec<String> = ce.as_object().unwrap().keys().cloned().collect();
        names.push("outboxheaders".into());
        names.extend(e.metadata().into_iter().map(|(k, _)| k.to_owned()));
        names.extend([field::HEADERS.to_owned(), field::PAYLOAD.to_owned()]);
        for name in names {
            assert!(
                outbox::RESERVED_HEADERS.contains(&name.as_str()),
                "{name} is not reserved"
            );
        }
        for (k, _) in e.binary_headers(DEFAULT_SOURCE) {
            assert!(
                k == "content-type" || outbox::reserved_header(&k).is_some(),
                "{k}"
            );
        }
    }

    #[test]
    fn binary_mode_prefixes_attributes() {
        let h = envelope().binary_headers(DEFAULT_SOURCE);
        assert!(h
            .iter()
            .any(|(k, v)| k == "ce-type" && v == "order.created"));
        assert!(h.iter().any(|(k, _)| k == "ce-traceparent"));
        assert!(h
            .iter()
            .any(|(k, v)| k == "content-type" && v == "application/json"));
    }
}
