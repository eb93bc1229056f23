//! Least-privilege roles: what a producer and a relay need, nothing more.

use crate::{Error, Result, Schema};

/// The `GRANT` statements for a producer role (enqueue, and the consumer
/// inbox) and a relay role (claim, publish to the PostgreSQL sink, settle,
/// reap, archive, dead-letter handling) on `schema`. Role names are
/// validated like schema names: they are spliced into SQL.
pub fn grants(schema: &Schema, producer: &str, relay: &str) -> Result<String> {
    for role in [producer, relay] {
        crate::validate_identifier(role).map_err(|_| Error::InvalidIdentifier {
            name: role.to_owned(),
            reason: "a role name must be lowercase letters, digits and underscores",
        })?;
    }
    let s = schema.quoted();
    Ok(format!(
        "-- producers: write events in their own transactions; consumers record what they processed\n\
         GRANT USAGE ON SCHEMA {s} TO {producer};\n\
         GRANT INSERT ON {s}.messages TO {producer};\n\
         -- enqueue returns the new row's id (RETURNING needs SELECT on it)\n\
         GRANT SELECT (id, event_id) ON {s}.messages TO {producer};\n\
         GRANT USAGE ON SEQUENCE {s}.messages_id_seq TO {producer};\n\
         GRANT SELECT, INSERT ON {s}.processed_events TO {producer};\n\
         GRANT SELECT ON {s}.all_messages TO {producer};\n\
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
         GRANT SELECT ON {s}.all_messages, {s}.schema_migrations TO {relay};\n"
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
}
