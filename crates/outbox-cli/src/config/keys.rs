//! Every configuration key: its name in the TOML file, its environment
//! variable, its flag and its default. One table, so the file, the
//! environment, the flags and `outbox config check` cannot drift apart.

/// One configuration key.
#[derive(Debug)]
pub struct Key {
    /// Name in the TOML file, e.g. `batch_size`.
    pub name: &'static str,
    /// Environment variable, e.g. `OUTBOX_BATCH_SIZE`.
    pub env: &'static str,
    /// Command-line flag, e.g. `--batch-size`.
    pub flag: &'static str,
    /// Default as text, or `None` when unset by default.
    pub default: Option<&'static str>,
    /// Holds URLs whose passwords must never be printed.
    pub secret: bool,
}

const fn key(
    name: &'static str,
    env: &'static str,
    flag: &'static str,
    default: Option<&'static str>,
) -> Key {
    Key {
        name,
        env,
        flag,
        default,
        secret: false,
    }
}

/// All keys, in the order `outbox config check` prints them.
pub const KEYS: &[Key] = &[
    Key {
        secret: true,
        ..key("database_url", "DATABASE_URL", "--database-url", None)
    },
    key(
        "schema",
        "OUTBOX_SCHEMA",
        "--schema",
        Some(outbox::DEFAULT_SCHEMA),
    ),
    Key {
        secret: true,
        ..key(
            "publisher",
            "OUTBOX_PUBLISHER",
            "--publisher",
            Some("postgres"),
        )
    },
    key(
        "batch_size",
        "OUTBOX_BATCH_SIZE",
        "--batch-size",
        Some("500"),
    ),
    key(
        "max_batch_bytes",
        "OUTBOX_MAX_BATCH_BYTES",
        "--max-batch-bytes",
        Some("16MiB"),
    ),
    key(
        "max_message_bytes",
        "OUTBOX_MAX_MESSAGE_BYTES",
        "--max-message-bytes",
        Some("2MiB"),
    ),
    key(
        "max_attempts",
        "OUTBOX_MAX_ATTEMPTS",
        "--max-attempts",
        Some("10"),
    ),
    key(
        "backoff",
        "OUTBOX_BACKOFF",
        "--backoff",
        Some("1s,5s,30s,2m,10m"),
    ),
    key("jitter", "OUTBOX_JITTER", "--jitter", Some("0.1")),
    key("lease", "OUTBOX_LEASE", "--lease", Some("5m")),
    key(
        "publish_timeout",
        "OUTBOX_PUBLISH_TIMEOUT",
        "--publish-timeout",
        Some("30s"),
    ),
    key(
        "ordering",
        "OUTBOX_ORDERING",
        "--ordering",
        Some("aggregate"),
    ),
    key(
        "bucket_lease",
        "OUTBOX_BUCKET_LEASE",
        "--bucket-lease",
        Some("30s"),
    ),
    key("relay_id", "OUTBOX_RELAY_ID", "--relay-id", None),
    key("notify", "OUTBOX_NOTIFY", "--notify", Some("on")),
    key(
        "poll_interval",
        "OUTBOX_POLL_INTERVAL",
        "--poll-interval",
        Some("1s"),
    ),
    key(
        "reap_interval",
        "OUTBOX_REAP_INTERVAL",
        "--reap-interval",
        Some("30s"),
    ),
    key(
        "concurrency",
        "OUTBOX_CONCURRENCY",
        "--concurrency",
        // RelayConfig::default().concurrency; a test holds them together.
        Some("4"),
    ),
    key(
        "rate_limit",
        "OUTBOX_RATE_LIMIT",
        "--rate-limit",
        Some("off"),
    ),
    key(
        "archive_after",
        "OUTBOX_ARCHIVE_AFTER",
        "--archive-after",
        Some("off"),
    ),
    key(
        "metrics_addr",
        "OUTBOX_METRICS_ADDR",
        "--metrics-addr",
        None,
    ),
    key(
        "metrics_topics",
        "OUTBOX_METRICS_TOPICS",
        "--metrics-topics",
        Some("100"),
    ),
    key(
        "log_format",
        "OUTBOX_LOG_FORMAT",
        "--log-format",
        Some("text"),
    ),
];

/// The key called `name`.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The known key closest to a misspelt `name`, if any is close.
pub fn suggest(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (distance(name, k.name), k.name))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance, enough for "did you mean" on short names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_env_and_flags_are_consistent() {
        for k in KEYS {
            assert_eq!(k.flag, format!("--{}", k.name.replace('_', "-")));
            if k.name != "database_url" {
                assert_eq!(k.env, format!("OUTBOX_{}", k.name.to_uppercase()));
            }
        }
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggest("bach_size"), Some("batch_size"));
        assert_eq!(suggest("leese"), Some("lease"));
        assert_eq!(suggest("completely_else"), None);
    }
}
