//! Any string as a `--publisher` URL, through every publisher's config
//! parser (parsing only: nothing is built, nothing connects). None panics,
//! and a password in the URL's `user:password@` part never shows in an
//! error message or in the parsed config's `Debug` output.
#![no_main]
use libfuzzer_sys::fuzz_target;
use outbox_relay::publishers::{amqp, asynq, http, kafka, mqtt, nats, redis};
use std::fmt::Debug;

fuzz_target!(|url: &str| {
    let shown = parse_all(url);
    let Some(password) = password(url) else {
        return;
    };
    // The same URL with the password replaced: a message that still holds
    // the password's text got it from elsewhere (a word such as
    // "password" in the message itself), not from the URL.
    let stand_in = if password.contains('Q') { "Z" } else { "Q" };
    let other = parse_all(&url.replacen(password, &stand_in.repeat(password.len()), 1));
    for (s, o) in shown.iter().zip(&other) {
        assert!(
            !s.contains(password) || o.contains(password),
            "password shown: {s}"
        );
    }
});

/// Each parser sees every input, so each must also refuse the others'
/// schemes cleanly.
fn parse_all(url: &str) -> [String; 7] {
    [
        show(amqp::AmqpConfig::from_url(url)),
        show(mqtt::MqttConfig::from_url(url)),
        show(redis::RedisConfig::from_url(url)),
        show(asynq::AsynqConfig::from_url(url)),
        show(nats::NatsConfig::from_url(url)),
        show(kafka::KafkaConfig::from_url(url)),
        show(http::HttpConfig::from_url_and_env(url, |_| None)),
    ]
}

fn show<T: Debug>(parsed: outbox_relay::Result<T>) -> String {
    match parsed {
        Ok(config) => format!("{config:?}"),
        Err(e) => e.to_string(),
    }
}

/// The password of `scheme://user:password@host…`, when it is long enough
/// and unique enough in the URL that finding it in a message means it leaked.
fn password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (password.len() >= 6 && url.matches(password).count() == 1 && !"***".contains(password))
        .then_some(password)
}
