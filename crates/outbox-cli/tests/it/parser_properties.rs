//! Property tests, bounded, for the parsers a user's input goes through:
//! publisher URLs, durations and the config file. The same properties as
//! the fuzz targets in `fuzz/` (which run longer, by hand); these run in CI
//! on every change.

use outbox_cli::config::load_str;
use outbox_cli::config::parse::{backoff, parse_duration, positive_duration, LONGEST};
use outbox_relay::publishers::{amqp, asynq, http, kafka, mqtt, nats, redis};
use proptest::prelude::*;
use std::fmt::Debug;
use std::path::Path;

fn show<T: Debug>(parsed: outbox_relay::Result<T>) -> String {
    match parsed {
        Ok(config) => format!("{config:?}"),
        Err(e) => e.to_string(),
    }
}

fn parse_all(url: &str) -> Vec<String> {
    vec![
        show(amqp::AmqpConfig::from_url(url)),
        show(mqtt::MqttConfig::from_url(url)),
        show(redis::RedisConfig::from_url(url)),
        show(asynq::AsynqConfig::from_url(url)),
        show(nats::NatsConfig::from_url(url)),
        show(kafka::KafkaConfig::from_url(url)),
        show(http::HttpConfig::new(url)),
    ]
}

/// URLs shaped like real ones, with a password that appears nowhere else.
fn url_with_password() -> impl Strategy<Value = (String, String)> {
    (
        prop::sample::select(vec![
            "amqp", "amqps", "mqtt", "mqtts", "redis", "rediss", "asynq", "nats", "kafka", "http",
            "https", "ftp",
        ]),
        "[a-z]{1,8}",
        "[A-Z]{8,16}",
        "[a-z0-9.-]{1,20}",
        prop::option::of(1u16..),
        "[a-zA-Z0-9/_=&?%.-]{0,30}",
    )
        .prop_map(|(scheme, user, password, host, port, rest)| {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            (
                format!("{scheme}://{user}:{password}@{host}{port}/{rest}"),
                password,
            )
        })
}

/// URLs whose password holds raw `/#?@:` and whose query may carry a
/// misspelt option with a secret value; the secret appears nowhere else.
fn url_with_raw_password() -> impl Strategy<Value = (String, String, String)> {
    (
        prop::sample::select(vec![
            "amqp", "mqtt", "redis", "asynq", "nats", "kafka", "http", "https", "postgres",
        ]),
        "Q[A-Z/#?@:]{6,14}Z",
        "[a-z]{1,10}(:[0-9]{1,5})?",
        prop::sample::select(vec!["pasword", "tokn", "pw", "sasl.pasword", "password"]),
        "V[A-Z]{8,12}W",
    )
        .prop_map(|(scheme, password, host, key, value)| {
            (
                format!("{scheme}://user:{password}@{host}/x?{key}={value}"),
                password,
                value,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn raw_reserved_characters_and_misspelt_options_leak_nothing(
        (url, password, value) in url_with_raw_password()
    ) {
        for shown in parse_all(&url)
            .into_iter()
            .chain([outbox_cli::config::parse::redact(&url)])
        {
            prop_assert!(!shown.contains(&password), "{url}: {shown}");
            // The CLI's redaction keeps the query (it shows config values);
            // the publisher parsers show none of it.
            if !shown.contains("user:***@") || !shown.contains('?') {
                prop_assert!(!shown.contains(&value), "{url}: {shown}");
            }
        }
    }

    #[test]
    fn no_publisher_url_parser_panics(url in "\\PC{0,80}") {
        parse_all(&url);
    }

    #[test]
    fn a_password_in_a_publisher_url_is_never_shown((url, password) in url_with_password()) {
        for shown in parse_all(&url) {
            prop_assert!(!shown.contains(&password), "{url}: {shown}");
        }
    }

    #[test]
    fn durations_accepted_keep_their_promise(s in "\\PC{0,24}|[0-9]{1,12}(ms|s|m|h|d|w|y)?") {
        if let Ok(d) = parse_duration(&s) {
            prop_assert_eq!(positive_duration(&s).is_ok(), !d.is_zero() && d <= LONGEST);
        }
        if let Ok(d) = positive_duration(&s) {
            prop_assert!(!d.is_zero() && d <= LONGEST);
        }
    }

    #[test]
    fn a_backoff_list_has_one_positive_step_per_item(s in "([0-9]{1,6}(ms|s|m|h)?,){0,6}[0-9]{1,6}(ms|s|m|h)?|\\PC{0,30}") {
        if let Ok(steps) = backoff(&s) {
            prop_assert_eq!(steps.len(), s.split(',').count());
            prop_assert!(steps.iter().all(|d| !d.is_zero() && *d <= LONGEST));
        }
    }

    /// A config file the loader accepts is one the relay accepts, whose
    /// retry schedule computes, and whose rendering loads back.
    #[test]
    fn an_accepted_config_file_runs_and_renders_back(
        lines in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "schema", "batch_size", "max_attempts", "backoff", "jitter", "lease", "publish_timeout",
                    "relay_id", "notify", "poll_interval", "reap_interval", "concurrency",
                    "rate_limit", "archive_after", "metrics_addr", "log_format", "publisher",
                ]),
                prop::sample::select(vec![
                    "\"outbox\"", "500", "0", "-1", "1", "99999999999", "\"1s,5s\"", "\"0s\"",
                    "\"100y\"", "\"300000y\"", "\"1ms\"", "0.5", "true", "\"05\"", "\".5\"", "\"r1\"",
                    "\"127.0.0.1:9\"", "\"json\"", "\"postgres\"", "\"x\"", "\"\"",
                ]),
            ),
            0..6,
        )
    ) {
        let mut text = String::new();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in lines {
            if seen.insert(k) {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        let path = Path::new("prop.toml");
        if let Ok(settings) = load_str(path, &text, &[], |_| None) {
            let config = settings.relay_config();
            prop_assert!(config.validate().is_ok(), "{text}");
            let now = chrono::Utc::now();
            for attempt in 1..=config.retry.schedule.len() as i32 + 1 {
                config.retry.next_run_at(attempt, now);
            }
            let rendered = settings.render();
            prop_assert!(load_str(path, &rendered, &[], |_| None).is_ok(), "{rendered}");
        }
    }
}
