//! Least-privilege roles: what a producer and a relay need, nothing more.
//!
//! A producer writes new events and nothing else: it may insert only the
//! columns an enqueue writes (so every row it creates starts pending,
//! unclaimed, with no attempts, errors or dates of its own choosing), read
//! back only the `id` and `event_id` that `RETURNING` hands to the library,
//! and read no payload, status or history, its own or anyone else's.
//! Column grants are enough here: they are checked on every INSERT, cost a
//! producer nothing per row (a trigger would), and the table owner, the one
//! role they do not bind, can drop any constraint or trigger anyway.

use crate::{Error, Result, Schema};

/// Columns a producer may write: exactly those the library's enqueue
/// statements name (`sql::Queries::enqueue_one`, `enqueue_many`); the
/// documented plain SQL insert names a subset. Every other column takes
/// its default, which is the initial state.
pub const PRODUCER_INSERT_COLUMNS: &[&str] = &[
    "event_id",
    "event_type",
    "event_version",
    "aggregate_type",
    "aggregate_id",
    "topic",
    "payload",
    "headers",
];

/// Role names PostgreSQL gives a meaning of its own in `GRANT ... TO`:
/// granting to them reaches every role (`public`) or is an error or a
/// different role than the one named.
const RESERVED_ROLE_NAMES: &[&str] = &[
    "public",
    "none",
    "current_user",
    "session_user",
    "current_role",
];

/// Checks a role name before it is spliced into a `GRANT`.
fn validate_role(role: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidRoleName {
            name: role.to_owned(),
            reason,
        })
    };
    if RESERVED_ROLE_NAMES.contains(&role) {
        return bad("PostgreSQL reserves this name; grant to a role of your own");
    }
    if role.starts_with("pg_") {
        return bad("names starting with pg_ are reserved for PostgreSQL's own roles");
    }
    match crate::validate_identifier(role) {
        Ok(()) => Ok(()),
        Err(_) => bad("a role name must be lowercase letters, digits and underscores, starting with a letter or underscore, at most 63 bytes"),
    }
}

/// The `GRANT` statements for a producer role (enqueue, and the consumer
/// inbox) and a relay role (claim, publish to the PostgreSQL sink, settle,
/// reap, archive, dead-letter handling) on `schema`. Role names are
/// validated (they are spliced into SQL) and must not be names PostgreSQL
/// reserves.
pub fn grants(schema: &Schema, producer: &str, relay: &str) -> Result<String> {
    validate_role(producer)?;
    validate_role(relay)?;
    let s = schema.quoted();
    let columns = PRODUCER_INSERT_COLUMNS.join(", ");
    Ok(format!(
        "-- start from nothing on the outbox's tables and sequences, so that applying this again after\n\
         -- an upgrade also takes back what an older build granted (producers had INSERT on every\n\
         -- column of messages and SELECT on all_messages)\n\
         REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {producer}, {relay};\n\
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {producer}, {relay};\n\
         -- producers: write new events in their own transactions; consumers record what they processed\n\
         GRANT USAGE ON SCHEMA {s} TO {producer};\n\
         -- only the columns an enqueue writes: status, attempts, claims, errors and dates keep their defaults\n\
         GRANT INSERT ({columns}) ON {s}.messages TO {producer};\n\
         -- enqueue returns the new row's id (RETURNING needs SELECT on it); no payload is readable\n\
         GRANT SELECT (id, event_id) ON {s}.messages TO {producer};\n\
         GRANT USAGE ON SEQUENCE {s}.messages_id_seq TO {producer};\n\
         -- the id's default (PUBLIC has EXECUTE unless a database took it away)\n\
         GRANT EXECUTE ON FUNCTION {s}.next_message_id() TO {producer};\n\
         GRANT SELECT, INSERT ON {s}.processed_events TO {producer};\n\
         -- the relay: claim, settle, reap, archive, dead letters, the postgres sink\n\
         GRANT USAGE ON SCHEMA {s} TO {relay};\n\
         GRANT SELECT, UPDATE, DELETE ON {s}.messages TO {relay};\n\
         -- (archiving locks the rows it moves: FOR UPDATE needs UPDATE)\n\
         GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.messages_sent TO {relay};\n\
         GRANT SELECT, INSERT ON {s}.archived_messages TO {relay};\n\
         GRANT SELECT, INSERT ON {s}.dead_replays TO {relay};\n\
         GRANT USAGE ON SEQUENCE {s}.dead_replays_id_seq TO {relay};\n\
         GRANT INSERT, SELECT ON {s}.published_events TO {relay};\n\
         GRANT USAGE ON SEQUENCE {s}.published_events_id_seq TO {relay};\n\
         GRANT SELECT ON {s}.all_messages, {s}.schema_migrations TO {relay};\n\
         -- ordering per aggregate: relays lease buckets of aggregates to each other\n\
         GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.relays TO {relay};\n\
         GRANT SELECT, UPDATE ON {s}.relay_buckets TO {relay};\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_are_validated() {
        let s = Schema::default();
        assert!(grants(&s, "app", "relay").is_ok());
        assert!(grants(&s, "app; DROP TABLE x", "relay").is_err());
        assert!(grants(&s, "app", "Relay").is_err());
    }

    #[test]
    fn reserved_role_names_are_refused_as_role_names() {
        let s = Schema::default();
        for bad in RESERVED_ROLE_NAMES
            .iter()
            .copied()
            .chain(["pg_monitor", "Relay", ""])
        {
            for err in [grants(&s, bad, "relay"), grants(&s, "app", bad)] {
                let text = err.unwrap_err().to_string();
                assert!(
                    text.starts_with(&format!("invalid role name {bad:?}")),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn producer_columns_are_exactly_what_enqueue_writes() {
        let q = super::super::Queries::new(&Schema::default());
        let list = format!("({})", PRODUCER_INSERT_COLUMNS.join(", "));
        assert!(q.enqueue_one.contains(&list), "{}", q.enqueue_one);
        assert!(q.enqueue_many.contains(&list), "{}", q.enqueue_many);
    }
}
