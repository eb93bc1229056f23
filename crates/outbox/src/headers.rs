//! Header names the relay's envelope owns.
//!
//! Publishers put headers next to the envelope's own names: as CloudEvents
//! extension attributes (`ce-<name>` in binary mode, top-level members in
//! structured mode) and, for AMQP, as transport headers beside the outbox
//! metadata. A header called `source`, `data` or `event_id` would then
//! overwrite, duplicate or be overwritten by the envelope's field of that
//! name. Such names are refused at enqueue, by the library here and, for
//! plain SQL producers, by the `messages_headers_valid` CHECK of migration 6,
//! whose lists must stay equal to these (a test compares them).

/// Header names refused at enqueue.
pub const RESERVED_HEADERS: &[&str] = &[
    // CloudEvents 1.0 context attributes and data members.
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
    "data",
    "data_base64",
    // Extension attributes the envelope adds.
    "eventversion",
    "aggregatetype",
    "outboxid",
    "topic",
    "outboxheaders",
    // Outbox metadata fields (Redis fields, AMQP/NATS/Kafka headers).
    "event_id",
    "message_id",
    "event_type",
    "event_version",
    "aggregate_type",
    "aggregate_id",
    "created_at",
    "headers",
    "payload",
];

/// Header name prefixes refused at enqueue: CloudEvents binary-mode
/// attribute headers (`ce-` for HTTP, AMQP and NATS, `ce_` for Kafka).
pub const RESERVED_HEADER_PREFIXES: &[&str] = &["ce-", "ce_"];

/// Why `name` may not be used as a header name, if it may not.
pub fn reserved_header(name: &str) -> Option<&'static str> {
    if RESERVED_HEADERS.contains(&name) {
        Some("the envelope carries a CloudEvents attribute or outbox field of that name")
    } else if RESERVED_HEADER_PREFIXES.iter().any(|p| name.starts_with(p)) {
        Some("names starting with ce- or ce_ are CloudEvents attribute headers")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quoted names inside every `ARRAY[...]` of `sql`.
    fn arrays(sql: &str) -> Vec<Vec<String>> {
        sql.split("ARRAY[")
            .skip(1)
            .map(|rest| {
                let body = &rest[..rest.find(']').expect("closing bracket")];
                body.split(',')
                    .map(|n| n.trim().trim_matches('\'').to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_sql_check_reserves_exactly_these_names() {
        let sql = crate::sql::MIGRATIONS
            .iter()
            .find(|m| m.version == 6)
            .expect("migration 6")
            .sql;
        let want: Vec<String> = RESERVED_HEADERS.iter().map(|s| s.to_string()).collect();
        let found = arrays(sql);
        // Once, in the function the CHECK, the sweep and replays call.
        assert_eq!(found.len(), 1, "{sql}");
        for list in found {
            assert_eq!(list, want);
        }
        for p in RESERVED_HEADER_PREFIXES {
            assert_eq!(
                sql.matches(&format!("@.key starts with \"{p}\"")).count(),
                1,
                "prefix {p}"
            );
        }
        assert_eq!(
            sql.matches("starts with").count(),
            RESERVED_HEADER_PREFIXES.len()
        );
    }

    #[test]
    fn reasons_name_the_rule() {
        assert!(reserved_header("source").is_some());
        assert!(reserved_header("ce-type").is_some());
        assert!(reserved_header("ce_id").is_some());
        assert!(reserved_header("traceparent").is_none());
        assert!(reserved_header("Source").is_none());
        assert!(reserved_header("tenant").is_none());
    }
}
