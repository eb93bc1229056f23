//! Properties of the input checks, over generated input: they never panic,
//! and what they accept is safe to use.

use outbox::{NewMessage, Schema};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn schema_names_are_accepted_only_when_plain(name in "\\PC{0,80}") {
        match Schema::new(&name) {
            Ok(s) => {
                prop_assert!(s.name().len() <= 63);
                prop_assert!(s.name().chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
                prop_assert!(!s.name().starts_with("pg_"));
                prop_assert_eq!(s.quoted(), format!("\"{}\"", name));
            }
            Err(e) => prop_assert!(e.to_string().starts_with("invalid schema name")),
        }
    }

    #[test]
    fn plain_names_are_always_accepted(name in "[a-o_][a-z0-9_]{0,62}") {
        prop_assert!(Schema::new(&name).is_ok());
    }

    #[test]
    fn any_serializable_payload_builds_a_message(
        topic in "\\PC{0,40}",
        key in "\\PC{0,20}",
        value in any::<i64>(),
        text in "\\PC{0,200}",
    ) {
        let payload = serde_json::json!({ "k": key, "v": value, "t": text });
        let msg = NewMessage::new("e", "a", "1", &payload).unwrap().topic(topic.clone());
        prop_assert_eq!(msg.topic_name(), topic.as_str());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn role_names_are_granted_to_only_when_plain_and_not_reserved(name in "\\PC{0,80}|(pg_|current_|session_)?[a-z_]{0,12}") {
        match outbox::sql::grants(&Schema::default(), &name, "relay") {
            Ok(sql) => {
                prop_assert!(Schema::new(&name).is_ok());
                prop_assert!(!["public", "none", "current_user", "session_user", "current_role"].contains(&name.as_str()));
                let to = format!(" TO {name};");
                prop_assert!(sql.contains(&to));
            }
            Err(e) => {
                let want = format!("invalid role name {name:?}");
                prop_assert!(e.to_string().starts_with(&want), "{}", e);
            }
        }
    }

    #[test]
    fn a_header_name_is_reserved_exactly_when_the_envelope_owns_it(name in "\\PC{0,24}|(ce[-_])?[a-z_]{0,16}") {
        let owned = outbox::RESERVED_HEADERS.contains(&name.as_str())
            || name.starts_with("ce-")
            || name.starts_with("ce_");
        prop_assert_eq!(outbox::reserved_header(&name).is_some(), owned);
    }
}
