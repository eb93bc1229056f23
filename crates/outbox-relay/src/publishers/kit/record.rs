//! The envelope as a record of named text fields, the shape the
//! publishers whose transport carries key-value pairs all write: the
//! metadata under its field names, then `headers` (a JSON object); the
//! payload's JSON text apart, as the body (or, in a Redis entry, the last
//! field). [`crate::Envelope::from_fields`] reads it back.

use crate::envelope::{field, Envelope};
use crate::Message;

/// One message as fields and a body.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// The envelope the record was made of (for the attributes a transport
    /// adds, such as CloudEvents' binary headers).
    pub(crate) envelope: Envelope,
    /// `(name, value)`: the metadata, then `headers`.
    pub(crate) fields: Vec<(String, String)>,
    /// The payload's JSON text.
    pub(crate) payload: String,
}

impl Record {
    pub(crate) fn new(m: &Message) -> Self {
        let envelope = Envelope::from(m);
        let mut fields: Vec<(String, String)> = envelope
            .metadata()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        fields.push((
            field::HEADERS.to_owned(),
            serde_json::to_string(&envelope.headers).expect("string map serializes"),
        ));
        let payload = envelope.payload.get().to_owned();
        Self {
            envelope,
            fields,
            payload,
        }
    }

    /// The bytes of the field names and values, for the size checks.
    pub(crate) fn fields_len(&self) -> usize {
        self.fields.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_read_back_as_the_envelope() {
        let m = Message {
            id: 7,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".into(),
            event_version: 2,
            aggregate_type: "order".into(),
            aggregate_id: "o-1".into(),
            topic: "orders".into(),
            payload: serde_json::json!({"n": 1, "note": "café"}).into(),
            headers: [("traceparent".to_owned(), "00-ab-cd-01".to_owned())].into(),
            attempts: 1,
            created_at: chrono::Utc::now(),
        };
        let r = Record::new(&m);
        let back = Envelope::from_fields(
            r.fields
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain([(field::PAYLOAD, r.payload.as_str())]),
        )
        .unwrap();
        assert_eq!(back, Envelope::from(&m));
        assert_eq!(r.fields.last().unwrap().0, field::HEADERS);
    }
}
