//! Every configuration key, declared once: its name in the TOML file, its
//! environment variable, its flag, its default (derived from the engine's
//! own defaults, `RelayConfig::default()`), its bounds, where its value
//! goes (`apply`) and its documentation. The config loader, `outbox config check`, the flags and
//! their `--help`, and the table in docs/operations.md
//! ([`markdown_table`], checked by a test) all come from this table
//! ([`keys`]): the CLI's own keys ([`TABLE`]), and after `publisher` the
//! settings each publisher declares in its folder (`Declaration::settings`,
//! the webhook's), whose values go to the publisher.

use super::{parse, Settings};
use outbox::Schema;
use outbox_relay::publishers::Setting;
use outbox_relay::relay::{
    Ordering, RelayConfig, BATCH_SIZE_RANGE, CONCURRENCY_RANGE, MIN_BUCKET_LEASE,
    MIN_BUCKET_LEASE_WHY, MIN_DB_TIMEOUT, MIN_DB_TIMEOUT_WHY, MIN_LEASE, MIN_LEASE_WHY,
    MIN_PUBLISH_TIMEOUT, MIN_PUBLISH_TIMEOUT_WHY,
};
use outbox_relay::retry::MAX_ATTEMPTS_RANGE;
use std::ops::RangeInclusive;
use std::sync::LazyLock;
use std::time::Duration;

/// The publisher when none is given: the outbox database's own
/// `published_events` table.
pub const DEFAULT_PUBLISHER: &str = "postgres";

/// One configuration key.
#[derive(Debug, Clone)]
pub struct Key {
    /// Name in the TOML file, e.g. `batch_size`.
    pub name: &'static str,
    /// Environment variable, e.g. `OUTBOX_BATCH_SIZE`.
    pub env: &'static str,
    /// Command-line flag, e.g. `--batch-size`; none for a secret token,
    /// as command lines show in `ps`.
    pub flag: Option<&'static str>,
    /// The default as a user would write it, or `None` when unset by
    /// default.
    pub default: fn() -> Option<String>,
    /// What unset means, shown where a default would be (`off`,
    /// `host-pid-random`).
    pub unset: Option<&'static str>,
    /// Holds URLs whose passwords must never be printed.
    pub secret: bool,
    /// Is a secret as a whole (a token): printed as `***`, whatever it holds.
    pub hidden: bool,
    /// A flag of every subcommand (`outbox --schema x stats`), not only of
    /// `relay` and `config check`.
    pub global: bool,
    /// A number (or `off`): `config check` writes a numeric value as a TOML
    /// number. Text keys stay strings, so `relay_id = "1e3"` reads back as
    /// written.
    pub numeric: bool,
    /// Parses a value and stores it where it belongs in [`Settings`] (the
    /// engine's [`RelayConfig`] for the relay's own settings): the one place
    /// that says what a key sets.
    pub apply: fn(&str, &mut Settings) -> Result<(), String>,
    /// One sentence for `--help`.
    pub help: fn() -> String,
    /// What it does and accepts, for the docs table.
    pub doc: fn() -> String,
    /// The publisher's setting this key is (its default, docs and check
    /// come from there, and its value goes to the publisher), if any.
    pub setting: Option<&'static Setting>,
}

impl Key {
    /// A publisher's declared setting, as a key.
    fn of_setting(s: &'static Setting) -> Self {
        Self {
            flag: s.flag,
            unset: s.unset,
            hidden: s.secret,
            numeric: s.numeric,
            setting: Some(s),
            ..key(s.name, s.env, "")
        }
    }

    /// The default as a user would write it (`None`: unset by default).
    pub fn default_value(&self) -> Option<String> {
        match self.setting {
            Some(s) => s.default.map(str::to_owned),
            None => (self.default)(),
        }
    }

    /// Parses `v` and stores it where it belongs in `settings`.
    pub fn apply_to(&self, v: &str, settings: &mut Settings) -> Result<(), String> {
        match self.setting {
            Some(s) => {
                (s.check)(v)?;
                settings.publisher_settings.set(s.name, v);
                Ok(())
            }
            None => (self.apply)(v, settings),
        }
    }

    /// One sentence for `--help`.
    pub fn help_text(&self) -> String {
        self.setting.map_or_else(self.help, |s| s.help.to_owned())
    }

    /// What it does and accepts, for the docs table.
    pub fn doc_text(&self) -> String {
        self.setting.map_or_else(self.doc, |s| s.meaning.to_owned())
    }

    /// The default as `--help` and the docs show it.
    pub fn shown_default(&self) -> Option<String> {
        self.default_value().or(self.unset.map(str::to_owned))
    }

    /// `v` as it may be printed: `***` for a token, a URL without its
    /// password.
    pub fn shown_value(&self, v: &str) -> String {
        if self.hidden {
            outbox_relay::redact::HIDDEN.to_owned()
        } else if self.secret {
            super::parse::redact(v)
        } else {
            v.to_owned()
        }
    }

    /// The flag's `--help`: its sentence, variable and default.
    pub fn help_line(&self) -> String {
        let default = self
            .shown_default()
            .map(|d| format!(" [default: {d}]"))
            .unwrap_or_default();
        format!("{} [env: {}]{default}", self.help_text(), self.env)
    }
}

/// `--help` of the key called `name` (for flags declared by hand).
pub fn help_line(name: &str) -> String {
    find(name).expect("a known key").help_line()
}

fn d() -> RelayConfig {
    RelayConfig::default()
}

/// A duration as the config takes it: `5m`, `30s`, `250ms`.
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= n && ms % n == 0 {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// A size as the config takes it: `16MiB`, `512KiB`, `1000`.
pub fn bytes_text(b: usize) -> String {
    for (unit, n) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= n && b % n == 0 {
            return format!("{}{unit}", b / n);
        }
    }
    b.to_string()
}

fn span<T: std::fmt::Display>(r: &RangeInclusive<T>) -> String {
    format!("{}–{}", r.start(), r.end())
}

fn switch(on: bool) -> String {
    if on { "on" } else { "off" }.to_owned()
}

/// A key of `relay` and `config check` (defaults filled in below); an
/// empty `flag`: none.
const fn key(name: &'static str, env: &'static str, flag: &'static str) -> Key {
    Key {
        name,
        env,
        flag: if flag.is_empty() { None } else { Some(flag) },
        default: || None,
        unset: None,
        secret: false,
        hidden: false,
        global: false,
        numeric: false,
        apply: |_, _| Err("this key sets nothing (a bug: give it an `apply`)".into()),
        help: String::new,
        doc: String::new,
        setting: None,
    }
}

/// Every key, in the order `outbox config check` prints them: the CLI's
/// own, with the publishers' declared settings after `publisher`.
pub fn keys() -> &'static [Key] {
    static ALL: LazyLock<Vec<Key>> = LazyLock::new(|| {
        let mut all = Vec::new();
        for k in TABLE {
            all.push(k.clone());
            if k.name == "publisher" {
                all.extend(
                    outbox_relay::publishers::declarations()
                        .into_iter()
                        .flat_map(|d| d.settings)
                        .map(Key::of_setting),
                );
            }
        }
        all
    });
    &ALL
}

/// Shortest operator-page token accepted: a guessable one would make the
/// token pointless.
pub const MIN_TOKEN: usize = 16;

/// The CLI's own keys, in the order `outbox config check` prints them.
pub const TABLE: &[Key] = &[
    Key {
        apply: |v, s| {
            s.database_url = Some(parse::database_url(v)?);
            Ok(())
        },
        secret: true,
        global: true,
        help: || "PostgreSQL URL of the outbox database".into(),
        doc: || "`postgres://…`, `postgresql://…` or libpq `key=value` pairs".into(),
        ..key("database_url", "DATABASE_URL", "--database-url")
    },
    Key {
        apply: |v, s| {
            s.schema = Schema::new(v).map_err(|e| e.to_string())?;
            Ok(())
        },
        global: true,
        default: || Some(outbox::DEFAULT_SCHEMA.into()),
        help: || "Schema holding the outbox tables".into(),
        doc: || "lowercase letters, digits, `_`".into(),
        ..key("schema", "OUTBOX_SCHEMA", "--schema")
    },
    Key {
        apply: |v, s| {
            s.publisher = parse::publisher(v)?;
            Ok(())
        },
        secret: true,
        default: || Some(DEFAULT_PUBLISHER.into()),
        // From the publishers' own declarations: what this build serves.
        help: || {
            let urls: Vec<String> = outbox_relay::publishers::declarations()
                .iter()
                .map(|d| {
                    let schemes: Vec<String> =
                        d.schemes.iter().map(|s| format!("`{s}://…`")).collect();
                    format!("{} ({})", schemes.join(", "), d.summary)
                })
                .collect();
            format!(
                "Where to publish: `postgres` (the outbox database's published_events) or a URL: {}",
                urls.join("; ")
            )
        },
        doc: || {
            let prefixes: Vec<String> = outbox_relay::publishers::declarations()
                .iter()
                .flat_map(|d| d.schemes.iter().map(|s| format!("`{s}://`")))
                .collect();
            format!("`postgres` or a publisher URL: {}", prefixes.join(", "))
        },
        ..key("publisher", "OUTBOX_PUBLISHER", "--publisher")
    },
    Key {
        apply: |v, s| {
            s.relay.batch_size = parse::within(v, &BATCH_SIZE_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().batch_size.to_string()),
        help: || format!("Messages claimed per batch, {}", span(&BATCH_SIZE_RANGE)),
        doc: || format!("messages per claim, {}", span(&BATCH_SIZE_RANGE)),
        ..key("batch_size", "OUTBOX_BATCH_SIZE", "--batch-size")
    },
    Key {
        apply: |v, s| {
            s.relay.max_batch_bytes = parse::bytes(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(bytes_text(d().max_batch_bytes)),
        help: || {
            "A claim stops adding messages once they pass this size, payload, headers and text columns counted (it always takes one), e.g. 16MiB".into()
        },
        doc: || {
            "a claim stops adding rows once they reach this, payload, headers and text columns counted (it always takes one), so memory stays bounded whatever producers write; `KiB`/`MiB`/`GiB`".into()
        },
        ..key(
            "max_batch_bytes",
            "OUTBOX_MAX_BATCH_BYTES",
            "--max-batch-bytes",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.max_message_bytes = parse::bytes(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(bytes_text(d().max_message_bytes)),
        help: || {
            "A message (payload, headers and text columns) larger than this is never loaded: it goes dead naming the limit"
                .into()
        },
        doc: || {
            format!("a row larger than this (payload and headers as JSON text, plus topic, event type, aggregate type and id) is never loaded: it goes dead, \"message of N bytes (payload P bytes) exceeds the limit of M bytes\" (twice the library's `{}` payload limit, which counts compact JSON)", bytes_text(outbox::DEFAULT_MAX_PAYLOAD_BYTES))
        },
        ..key(
            "max_message_bytes",
            "OUTBOX_MAX_MESSAGE_BYTES",
            "--max-message-bytes",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.retry.max_attempts = parse::within(v, &MAX_ATTEMPTS_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().retry.max_attempts.to_string()),
        help: || {
            format!(
                "Attempts before a message goes dead, {}",
                span(&MAX_ATTEMPTS_RANGE)
            )
        },
        doc: || {
            format!(
                "attempts before a retryable failure goes dead, {}",
                span(&MAX_ATTEMPTS_RANGE)
            )
        },
        ..key("max_attempts", "OUTBOX_MAX_ATTEMPTS", "--max-attempts")
    },
    Key {
        apply: |v, s| {
            s.relay.retry.schedule = parse::backoff(v)?;
            Ok(())
        },
        default: || {
            let steps: Vec<String> = d().retry.schedule.into_iter().map(duration_text).collect();
            Some(steps.join(","))
        },
        help: || "Retry delays, the last repeats".into(),
        doc: || "delay after attempt 1, 2, …; the last step repeats".into(),
        ..key("backoff", "OUTBOX_BACKOFF", "--backoff")
    },
    Key {
        apply: |v, s| {
            s.relay.retry.jitter = parse::fraction(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().retry.jitter.to_string()),
        help: || "Fraction of each retry delay randomised, [0, 1)".into(),
        doc: || "± fraction of each delay randomised, in [0, 1)".into(),
        ..key("jitter", "OUTBOX_JITTER", "--jitter")
    },
    Key {
        apply: |v, s| {
            s.relay.lease = parse::duration_at_least(MIN_LEASE, MIN_LEASE_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().lease)),
        help: || {
            "A claim older than this is presumed dead: its rows count a failed attempt and are retried after the backoff, or go dead at max attempts".into()
        },
        doc: || {
            format!("a claim older than this is presumed dead and recovered as a failed attempt (backoff, then dead at `max_attempts`, naming the expired lease); renewed every half lease while a batch publishes; at least `{}`", duration_text(MIN_LEASE))
        },
        ..key("lease", "OUTBOX_LEASE", "--lease")
    },
    Key {
        apply: |v, s| {
            s.relay.publish_timeout =
                parse::duration_at_least(MIN_PUBLISH_TIMEOUT, MIN_PUBLISH_TIMEOUT_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().publish_timeout)),
        help: || {
            "How long one batch may take to publish before all of it fails retryably, spending an attempt".into()
        },
        doc: || {
            format!("a batch still publishing after this fails retryably (\"publish timed out after …\"), spending an attempt; at least `{}`", duration_text(MIN_PUBLISH_TIMEOUT))
        },
        ..key(
            "publish_timeout",
            "OUTBOX_PUBLISH_TIMEOUT",
            "--publish-timeout",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.db_timeout = parse::duration_at_least(MIN_DB_TIMEOUT, MIN_DB_TIMEOUT_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().db_timeout)),
        help: || {
            "Longest one database call may take; then the connection is dropped and the call retried on a new one (a network partition cannot hold the relay)".into()
        },
        doc: || {
            format!("a database call (taking a connection, then one statement) that has not answered after this fails, its connection dropped; the relay retries on a new connection within a second; at least `{}`", duration_text(MIN_DB_TIMEOUT))
        },
        ..key("db_timeout", "OUTBOX_DB_TIMEOUT", "--db-timeout")
    },
    Key {
        apply: |v, s| {
            s.relay.ordering = v.parse()?;
            Ok(())
        },
        default: || Some(d().ordering.as_str().into()),
        help: || {
            format!("`{}`: messages of one aggregate (aggregate_type, aggregate_id) are published in id order, k+1 only after k is sent or dead, other aggregates in parallel; `{}`: no order, for the last bit of throughput. Every relay of a schema must use the same", Ordering::Aggregate.as_str(), Ordering::None.as_str())
        },
        doc: || {
            "`aggregate`: the messages of one aggregate (`aggregate_type`, `aggregate_id`) are published in id order, k+1 only after k is sent or dead, through retries, several pipelines and several relays; other aggregates go in parallel. `none`: no order, for the last bit of throughput. Every relay of a schema must use the same (a relay warns when it sees the other mode)".into()
        },
        ..key("ordering", "OUTBOX_ORDERING", "--ordering")
    },
    Key {
        apply: |v, s| {
            s.relay.bucket_lease =
                parse::duration_at_least(MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().bucket_lease)),
        help: || {
            "With ordering on, how long a relay leases its share of the aggregates: a relay that dies hands them to the others after this long".into()
        },
        doc: || {
            format!("with ordering on, each relay leases a fair share of the aggregates (1,024 buckets) for this long, renewed every third of it; a relay that stops cleanly (`SIGTERM`, `relay --once`) frees its share at once, a crashed one only when its lease ends; at least `{}`", duration_text(MIN_BUCKET_LEASE))
        },
        ..key("bucket_lease", "OUTBOX_BUCKET_LEASE", "--bucket-lease")
    },
    Key {
        apply: |v, s| {
            s.relay_id = Some(parse::relay_id(v)?);
            Ok(())
        },
        unset: Some("host-pid-random"),
        help: || "Identifies this relay in `locked_by`".into(),
        doc: || "written to `locked_by`; with ordering on, each running relay needs its own".into(),
        ..key("relay_id", "OUTBOX_RELAY_ID", "--relay-id")
    },
    Key {
        apply: |v, s| {
            s.relay.notify = parse::switch(v)?;
            Ok(())
        },
        default: || Some(switch(d().notify)),
        help: || {
            "Wake up on the producers' NOTIFY: on|off (off for transaction-mode PgBouncer)".into()
        },
        doc: || "LISTEN/NOTIFY wake-ups; `off` behind transaction-mode PgBouncer".into(),
        ..key("notify", "OUTBOX_NOTIFY", "--notify")
    },
    Key {
        apply: |v, s| {
            s.relay.idle_sleep = parse::positive_duration(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().idle_sleep)),
        help: || "Sleep when there is nothing to do".into(),
        doc: || "sleep when there is nothing to do".into(),
        ..key("poll_interval", "OUTBOX_POLL_INTERVAL", "--poll-interval")
    },
    Key {
        apply: |v, s| {
            s.relay.reap_interval = parse::positive_duration(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().reap_interval)),
        help: || "How often expired leases are looked for".into(),
        doc: || "how often expired leases are looked for".into(),
        ..key("reap_interval", "OUTBOX_REAP_INTERVAL", "--reap-interval")
    },
    Key {
        apply: |v, s| {
            s.relay.concurrency = parse::within(v, &CONCURRENCY_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().concurrency.to_string()),
        help: || {
            format!("Claim/publish pipelines in parallel, {}; with ordering on, each aggregate's messages still go out in order", span(&CONCURRENCY_RANGE))
        },
        doc: || {
            format!("claim/publish pipelines in parallel, {}; batches publish side by side, and with `ordering = \"aggregate\"` (the default) each aggregate's messages still go out in order (with `none`, order across batches is not kept)", span(&CONCURRENCY_RANGE))
        },
        ..key("concurrency", "OUTBOX_CONCURRENCY", "--concurrency")
    },
    Key {
        apply: |v, s| {
            s.relay.rate_limit = parse::optional(v, |n| parse::number(n, 1, u32::MAX))?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().rate_limit.map_or("off".into(), |n| n.to_string())),
        help: || "At most this many messages per second, or `off`".into(),
        doc: || "at most this many messages per second".into(),
        ..key("rate_limit", "OUTBOX_RATE_LIMIT", "--rate-limit")
    },
    Key {
        apply: |v, s| {
            s.relay.archive_after = parse::optional(v, parse::positive_duration)?;
            Ok(())
        },
        default: || Some(d().archive_after.map_or("off".into(), duration_text)),
        help: || "Archive sent rows older than this while running, or `off`".into(),
        doc: || "the relay archives sent rows older than this".into(),
        ..key("archive_after", "OUTBOX_ARCHIVE_AFTER", "--archive-after")
    },
    Key {
        apply: |v, s| {
            s.metrics_addr = parse::optional(v, parse::socket_addr)?;
            Ok(())
        },
        unset: Some("off"),
        help: || {
            "Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9090 (0.0.0.0:9090 to listen beyond this host)".into()
        },
        doc: || {
            "`ip:port` serving `/metrics`, `/healthz`, `/readyz` (see [observability](observability.md)) and the [operator page](#operator-page) at `/`".into()
        },
        ..key("metrics_addr", "OUTBOX_METRICS_ADDR", "--metrics-addr")
    },
    Key {
        apply: |v, s| {
            s.metrics_topics = parse::topic_labels(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(outbox_relay::metrics::DEFAULT_TOPIC_CAP.to_string()),
        help: || {
            "Distinct topics that keep their own `topic` label on outbox_published_total (later ones count as `_other`), or `off` to drop the label".into()
        },
        doc: || {
            "distinct topics labelled on `outbox_published_total`; `off` drops the label".into()
        },
        ..key(
            "metrics_topics",
            "OUTBOX_METRICS_TOPICS",
            "--metrics-topics",
        )
    },
    Key {
        apply: |v, s| {
            s.ui_allowed_hosts = parse::host_names(v)?;
            Ok(())
        },
        unset: Some("none"),
        help: || {
            "Host names the operator page answers besides IP addresses and localhost, comma-separated, e.g. outbox.internal (any other Host header is refused: DNS rebinding)".into()
        },
        doc: || {
            "comma-separated names the [operator page](#operator-page) answers in `Host`, besides IP addresses and `localhost`".into()
        },
        ..key(
            "ui_allowed_hosts",
            "OUTBOX_UI_ALLOWED_HOSTS",
            "--ui-allowed-hosts",
        )
    },
    Key {
        apply: |v, s| {
            s.ui_token = Some(parse::ui_token(v, MIN_TOKEN)?);
            Ok(())
        },
        hidden: true,
        unset: Some("none"),
        help: || "Token the operator page's actions (replay, purge) need".into(),
        doc: || {
            format!("token the [operator page](#operator-page)'s actions (replay, purge) need, and beyond loopback reading too (unset: read-only); at least {MIN_TOKEN} characters, e.g. `openssl rand -hex 24`; no flag, as command lines show in `ps`")
        },
        ..key("ui_token", "OUTBOX_UI_TOKEN", "")
    },
    Key {
        apply: |v, s| {
            s.log_format = parse::log_format(v)?;
            Ok(())
        },
        global: true,
        default: || Some(crate::logging::LogFormat::default().as_str().into()),
        help: || {
            "Log lines as `text` (for people) or `json` (one object per line, for log shippers); levels come from RUST_LOG".into()
        },
        doc: || "`text` for people, `json` for log shippers".into(),
        ..key("log_format", "OUTBOX_LOG_FORMAT", "--log-format")
    },
];

/// The table of docs/operations.md, one row per key.
pub fn markdown_table() -> String {
    let mut out =
        String::from("| key | env | flag | default | meaning |\n| --- | --- | --- | --- | --- |\n");
    for k in keys() {
        let default = k
            .shown_default()
            .map_or("—".to_owned(), |d| format!("`{d}`"));
        let global = if k.global { " (global)" } else { "" };
        let flag = k.flag.map_or("—".to_owned(), |f| format!("`{f}`"));
        out.push_str(&format!(
            "| `{}` | `{}` | {flag}{global} | {default} | {} |\n",
            k.name,
            k.env,
            k.doc_text()
        ));
    }
    out
}

/// The key called `name`.
pub fn find(name: &str) -> Option<&'static Key> {
    keys().iter().find(|k| k.name == name)
}

/// The known key closest to a misspelt `name`, if any is close.
pub fn suggest(name: &str) -> Option<&'static str> {
    keys()
        .iter()
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
        for k in keys() {
            match k.flag {
                Some(flag) => assert_eq!(flag, format!("--{}", k.name.replace('_', "-"))),
                // Only a secret goes without a flag.
                None => assert!(k.hidden, "{}", k.name),
            }
            if k.name != "database_url" {
                assert_eq!(k.env, format!("OUTBOX_{}", k.name.to_uppercase()));
            }
        }
    }

    /// Each publisher's declared settings are keys, after `publisher`,
    /// and what a key of them loads reaches the publisher's settings.
    #[test]
    fn publisher_settings_are_keys() {
        let names: Vec<&str> = keys().iter().map(|k| k.name).collect();
        let at = names.iter().position(|n| *n == "publisher").unwrap();
        for d in outbox_relay::publishers::declarations() {
            for s in d.settings {
                let k = find(s.name).expect("a key per declared setting");
                assert!(names.iter().position(|n| *n == s.name).unwrap() > at);
                assert_eq!((k.env, k.flag, k.hidden), (s.env, s.flag, s.secret));
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
