//! Checks each message against its destination's limits before anything of
//! the batch is sent, with one wording for every publisher.
//!
//! Why before: a broker that meets an oversized message or a malformed
//! topic often answers by dropping the connection (NATS on max_payload,
//! Mosquitto on a bad topic, RabbitMQ on a header block larger than a
//! frame), and that connection carries the whole batch: the good messages
//! fail with it, some after they were delivered, and come back as
//! duplicates. Refused here, the bad message fails alone, permanently, with
//! a reason naming the limit it broke, and nothing else is touched.

// Each publisher uses a subset: a build with one publisher feature leaves
// the rest unused.
#![allow(dead_code)]

use crate::PublishError;

/// The URL option, the same on every publisher, that lets topics address a
/// broker's own control plane (`$JS.API.…`, `$SYS/…`, `amq.…`, `__…`).
pub(crate) const ALLOW_RESERVED: &str = "allow_reserved";

/// `size` bytes against `limit`: `"<publisher>: encoded message is N bytes,
/// <what> is L"`, where `what` names the limit as the operator would look
/// it up ("NATS server max_payload").
pub(crate) fn size(
    publisher: &str,
    size: usize,
    what: &str,
    limit: usize,
) -> Result<(), PublishError> {
    part_size(publisher, "encoded message", size, what, limit)
}

/// [`size`] for a part of the message (`part` = "header frame", …).
pub(crate) fn part_size(
    publisher: &str,
    part: &str,
    size: usize,
    what: &str,
    limit: usize,
) -> Result<(), PublishError> {
    if size <= limit {
        return Ok(());
    }
    Err(PublishError::permanent(format!(
        "{publisher}: {part} is {size} bytes, {what} is {limit}"
    )))
}

/// A destination (`what` = "subject", "topic", "queue", …) that `name`
/// cannot be, and why.
pub(crate) fn invalid(publisher: &str, what: &str, name: &str, why: &str) -> PublishError {
    PublishError::permanent(format!(
        "{publisher}: {what} {:?} is invalid: {why}",
        excerpt(name)
    ))
}

/// Refuses `name` when it starts with one of `prefixes`, unless the operator
/// set [`ALLOW_RESERVED`]. `role` says what the prefix addresses.
pub(crate) fn reserved(
    publisher: &str,
    what: &str,
    name: &str,
    prefixes: &[&str],
    role: &str,
    allow: bool,
) -> Result<(), PublishError> {
    if allow {
        return Ok(());
    }
    match prefixes.iter().find(|p| name.starts_with(*p)) {
        None => Ok(()),
        Some(prefix) => Err(PublishError::permanent(format!(
            "{publisher}: {what} {:?} starts with the reserved prefix {prefix:?} ({role}); \
             add {ALLOW_RESERVED}=true to the publisher URL to publish there",
            excerpt(name)
        ))),
    }
}

/// A kind of destination a publisher names after the topic (Kafka topics,
/// NATS subjects, ...): how its reasons name it, and the prefixes of the
/// broker's own.
#[derive(Debug)]
pub(crate) struct Destination {
    pub(crate) publisher: &'static str,
    /// "topic", "subject", ...
    pub(crate) what: &'static str,
    /// Prefixes of the broker's own destinations.
    pub(crate) reserved: &'static [&'static str],
    /// What they address, for [`reserved`]'s reason.
    pub(crate) role: &'static str,
}

impl Destination {
    /// Refuses `name` as [`invalid`] when `invalid_because` says why it
    /// cannot be one, else as [`reserved`] unless `allow_reserved`.
    pub(crate) fn check(
        &self,
        name: &str,
        invalid_because: Option<&str>,
        allow_reserved: bool,
    ) -> Result<(), PublishError> {
        if let Some(why) = invalid_because {
            return Err(invalid(self.publisher, self.what, name, why));
        }
        reserved(
            self.publisher,
            self.what,
            name,
            self.reserved,
            self.role,
            allow_reserved,
        )
    }
}

/// A header whose name or value the destination cannot carry.
pub(crate) fn header(publisher: &str, key: &str, why: &str) -> PublishError {
    PublishError::permanent(format!("{publisher}: header {:?} {why}", excerpt(key)))
}

/// Whether `c` is a character MQTT brokers refuse in a UTF-8 string
/// (MQTT 3.1.1 §1.5.3, as Mosquitto enforces it): NUL and the other
/// control characters, and the Unicode non-characters.
pub(crate) fn mqtt_forbidden(c: char) -> bool {
    let n = c as u32;
    c.is_control() || (0xFDD0..=0xFDEF).contains(&n) || n & 0xFFFE == 0xFFFE
}

/// A name is echoed in a reason (stored in `dead_reason`): a 64 KiB topic
/// must not fill the column.
fn excerpt(s: &str) -> &str {
    const MAX: usize = 120;
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `true`, `1` or `yes`; `false`, `0` or `no`.
pub(crate) fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    #[test]
    fn reasons_name_the_limit_and_the_opt_in() {
        let e = size("nats", 1_048_700, "NATS server max_payload", 1_048_576).unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent);
        assert_eq!(
            e.message,
            "nats: encoded message is 1048700 bytes, NATS server max_payload is 1048576"
        );
        assert!(size("nats", 10, "x", 10).is_ok());
        let e = reserved(
            "nats",
            "subject",
            "$JS.API.X",
            &["$"],
            "JetStream API",
            false,
        )
        .unwrap_err();
        assert!(
            e.message.contains("reserved prefix \"$\"")
                && e.message.contains("allow_reserved=true"),
            "{e}"
        );
        assert!(reserved("nats", "subject", "$JS.API.X", &["$"], "", true).is_ok());
        let long = "é".repeat(200);
        assert!(invalid("mqtt", "topic", &long, "too long").message.len() < 200);
    }

    #[test]
    fn mqtt_forbidden_characters() {
        for c in [
            '\0',
            '\t',
            '\u{7f}',
            '\u{85}',
            '\u{fffe}',
            '\u{fdd0}',
            '\u{1ffff}',
        ] {
            assert!(mqtt_forbidden(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '✓', '$'] {
            assert!(!mqtt_forbidden(c), "{c:?}");
        }
    }
}
