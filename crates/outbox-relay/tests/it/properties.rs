//! Properties over generated input: URL redaction never leaks a password,
//! the envelope survives a JSON round trip, the retry schedule stays within
//! its jitter bounds.

use chrono::{TimeZone, Utc};
use outbox_relay::redact::redact as redact_url; // the name these properties were written with
use outbox_relay::redact::redact;
use outbox_relay::{Envelope, RetryPolicy};
use proptest::prelude::*;
use std::time::Duration;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn redaction_never_leaks_the_password(
        scheme in "(postgres|redis|amqp|nats|mqtt|https?)",
        user in "[a-z]{1,8}",
        password in "[A-Za-z0-9%!~*]{4,16}",
        host in "[a-z]{1,10}(:[0-9]{1,5})?",
        rest in "(/[a-z0-9/]{0,10})?(\\?[a-z=&]{0,10})?",
    ) {
        let url = format!("{scheme}://{user}:{password}@{host}{rest}");
        let shown = redact_url(&url);
        prop_assert!(!shown.contains(&format!(":{password}@")), "{}", shown);
        prop_assert!(shown.contains(&format!("{user}:***@{host}")), "{}", shown);
    }

    #[test]
    fn a_raw_reserved_character_does_not_end_the_password_early(
        scheme in "(postgres|redis|amqp|nats)",
        password in "Q[A-Za-z0-9/#?@:%]{4,16}Z",
        host in "[a-z]{1,10}(:[0-9]{1,5})?",
        rest in "(/[a-z0-9]{0,10})?(\\?[a-z=&]{0,10})?",
    ) {
        let url = format!("{scheme}://user:{password}@{host}{rest}");
        let shown = redact(&url);
        prop_assert!(!shown.contains(&password), "{}", shown);
        prop_assert!(shown.contains(&format!("user:***@{host}")), "{}", shown);
    }

    #[test]
    fn a_libpq_password_is_hidden_whole(
        password in "Q[ -~]{0,20}Z",
        spaces in "( ?= ?| = |=)",
        other in "(host=h |dbname='a b' |)",
    ) {
        // libpq quoting: inside single quotes, \\ and \' are escapes.
        let quoted = format!("'{}'", password.replace('\\', "\\\\").replace('\'', "\\'"));
        let dsn = format!("{other}password{spaces}{quoted} user=u");
        let shown = redact(&dsn);
        prop_assert!(!shown.contains(&password), "{}", shown);
        prop_assert!(shown.ends_with("*** user=u"), "{}", shown);
        if !password.contains([' ', '\\', '\'']) {
            let bare = redact(&format!("{other}password{spaces}{password} user=u"));
            prop_assert!(!bare.contains(&password), "{}", bare);
        }
    }

    #[test]
    fn a_secret_query_parameter_is_hidden(
        key in "(password|token|sasl\\.password|auth_token|api_key|sslpassword)",
        value in "Q[A-Za-z0-9#@:/%]{4,16}Z",
        before in "([a-z]{1,5}=[a-z]{0,5}&)?",
    ) {
        let shown = redact(&format!("nats://h:4222/x?{before}{key}={value}"));
        prop_assert!(!shown.contains(&value), "{}", shown);
    }

    #[test]
    fn retry_after_is_bounded_or_none_and_never_panics(
        value in "\\PC{0,40}|[0-9]{1,30}|-[0-9]{1,20}|(Mon|Fri), [0-9]{2} (Jan|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        now_secs in 0u64..13_000_000_000,
    ) {
        use outbox_relay::publishers::http::{parse_retry_after, MAX_RETRY_AFTER};
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs);
        if let Some(d) = parse_retry_after(&value, now) {
            prop_assert!(d <= MAX_RETRY_AFTER);
        }
    }

    #[test]
    fn a_stored_error_is_a_bounded_prefix_without_nul(message in "\\PC{0,6000}|[\\x00-\\x7f]{0,5000}") {
        let stored = outbox_relay::PublishError::stored(&message);
        prop_assert!(stored.len() <= outbox_relay::PublishError::MAX_STORED);
        prop_assert!(!stored.contains('\0'));
        let cleaned = message.replace('\0', "\u{fffd}");
        prop_assert!(cleaned.starts_with(&*stored), "not a prefix");
    }

    #[test]
    fn redaction_never_panics(any_text in "\\PC{0,100}") {
        let _ = redact_url(&any_text);
    }

    #[test]
    fn envelope_round_trips(
        id in any::<i64>(),
        event_type in "\\PC{1,30}",
        version in 1..1000i32,
        aggregate_id in "\\PC{0,30}",
        header_key in "[a-zA-Z-]{1,20}",
        header_value in "\\PC{0,40}",
        number in any::<i64>(),
        secs in 0i64..4_000_000_000,
    ) {
        let e = Envelope {
            event_id: uuid::Uuid::from_u64_pair(id as u64, number as u64),
            message_id: id,
            event_type: event_type.clone(),
            event_version: version,
            aggregate_type: "a".into(),
            aggregate_id,
            topic: event_type,
            headers: [(header_key, header_value)].into(),
            payload: serde_json::json!({"n": number}).into(),
            created_at: Utc.timestamp_opt(secs, 0).unwrap(),
        };
        prop_assert_eq!(Envelope::from_json(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn envelope_decoding_never_panics(text in "\\PC{0,200}") {
        let _ = Envelope::from_json(&text);
    }

    #[test]
    fn retry_delays_stay_within_jitter(
        steps in proptest::collection::vec(1u64..100_000, 1..8),
        jitter in 0.0f64..0.99,
        attempt in 1i32..50,
    ) {
        let p = RetryPolicy {
            schedule: steps.iter().map(|ms| Duration::from_millis(*ms)).collect(),
            jitter,
            max_attempts: 10,
        };
        let now = Utc::now();
        let nominal = p.delay(attempt).as_secs_f64();
        let got = (p.next_run_at(attempt, now) - now).num_microseconds().unwrap() as f64 / 1e6;
        prop_assert!(got >= nominal * (1.0 - jitter) - 1e-5 && got <= nominal * (1.0 + jitter) + 1e-5);
    }
}
