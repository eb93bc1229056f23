//! Any string as a duration: the CLI's parser (flags such as
//! `--older-than`, and every duration key of the config file), the
//! backoff list, and the publishers' URL options (`timeout=5s`). None
//! panics, and what is accepted keeps its promise.
#![no_main]
use libfuzzer_sys::fuzz_target;
use outbox_cli::config::parse::{backoff, parse_duration, positive_duration, LONGEST};
use outbox_relay::publishers::redis::RedisConfig;
use std::time::Duration;

fuzz_target!(|s: &str| {
    if let Ok(d) = parse_duration(s) {
        let fits = !d.is_zero() && d <= LONGEST;
        assert_eq!(positive_duration(s).is_ok(), fits);
    }
    if let Ok(d) = positive_duration(s) {
        assert!(!d.is_zero() && d <= LONGEST);
    }
    if let Ok(steps) = backoff(s) {
        assert_eq!(steps.len(), s.split(',').count());
        assert!(steps.iter().all(|d| !d.is_zero() && *d <= LONGEST));
    }
    // The publishers' own, stricter form: digits then ms, s or m.
    let option: String = url::form_urlencoded::byte_serialize(s.as_bytes()).collect();
    if let Ok(c) = RedisConfig::from_url(&format!("redis://127.0.0.1?connect_timeout={option}")) {
        let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap());
        let n: u64 = n.parse().unwrap();
        let want = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            other => panic!("accepted unit {other:?}"),
        };
        assert!(!want.is_zero());
        assert_eq!(c.connect_timeout, want);
    }
});
