//! The effective configuration: defaults, then a TOML file (`--config`,
//! `OUTBOX_CONFIG`), then `OUTBOX_*` environment variables, then flags; the
//! later wins. Every value is checked, and every problem is reported at
//! once (one line each, naming the key, the value and where it came from),
//! before any command touches the database.

mod keys;
pub mod parse;

pub use keys::{help_line, markdown_table, Key, KEYS};

use crate::logging::LogFormat;
use outbox::Schema;
use outbox_relay::metrics::TopicLabels;
use outbox_relay::relay::{
    BATCH_SIZE_RANGE, CONCURRENCY_RANGE, MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY, MIN_DB_TIMEOUT,
    MIN_DB_TIMEOUT_WHY, MIN_LEASE, MIN_LEASE_WHY, MIN_PUBLISH_TIMEOUT, MIN_PUBLISH_TIMEOUT_WHY,
};
use outbox_relay::retry::MAX_ATTEMPTS_RANGE;
use outbox_relay::{RelayConfig, RetryPolicy};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The TOML file.
    File(PathBuf),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(p) => write!(f, "file {}", p.display()),
            Self::Env(v) => write!(f, "env {v}"),
            Self::Flag(fl) => write!(f, "flag {fl}"),
        }
    }
}

/// Every problem found, one per line.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    /// One problem: one line (the CLI's errors are one sentence). Several:
    /// a header, then one line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "invalid configuration: {one}"),
            all => {
                write!(f, "invalid configuration ({} problems):", all.len())?;
                for e in all {
                    write!(f, "\n  - {e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigErrors {}

/// One key's raw text and where it came from (`None`: unset).
#[derive(Debug, Clone)]
struct Raw {
    value: Option<String>,
    source: Source,
}

impl Raw {
    fn new(value: Option<String>, source: Source) -> Self {
        Self { value, source }
    }
}

/// The validated, effective configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The outbox database (`None`: not given).
    pub database_url: Option<String>,
    /// The outbox schema.
    pub schema: Schema,
    /// Where the relay publishes.
    pub publisher: String,
    /// Messages claimed per batch.
    pub batch_size: usize,
    /// Payload bytes past which a claim stops adding rows.
    pub max_batch_bytes: usize,
    /// Larger payloads are never loaded; the message goes dead.
    pub max_message_bytes: usize,
    /// Attempts before a message goes dead.
    pub max_attempts: i32,
    /// Retry delays after attempt 1, 2, …; the last repeats.
    pub backoff: Vec<Duration>,
    /// Fraction of each retry delay randomised.
    pub jitter: f64,
    /// Stale-claim timeout.
    pub lease: Duration,
    /// How long one batch may take to publish.
    pub publish_timeout: Duration,
    /// Deadline of each database call.
    pub db_timeout: Duration,
    /// Order per aggregate, or none.
    pub ordering: outbox_relay::relay::Ordering,
    /// How long a relay leases its share of the aggregates.
    pub bucket_lease: Duration,
    /// `locked_by`; generated per process when `None`.
    pub relay_id: Option<String>,
    /// LISTEN/NOTIFY wake-ups.
    pub notify: bool,
    /// Sleep when idle.
    pub poll_interval: Duration,
    /// How often expired leases are looked for.
    pub reap_interval: Duration,
    /// Parallel claim/publish pipelines.
    pub concurrency: usize,
    /// Messages per second, if limited.
    pub rate_limit: Option<u32>,
    /// Archive sent rows older than this, from the relay, if set.
    pub archive_after: Option<Duration>,
    /// Where metrics and health probes are served, if set.
    pub metrics_addr: Option<SocketAddr>,
    /// How topics label `outbox_published_total`.
    pub metrics_topics: TopicLabels,
    /// Names the operator page answers in `Host`, besides IP addresses
    /// and `localhost`.
    pub ui_allowed_hosts: Vec<String>,
    /// Log lines for people or for machines.
    pub log_format: LogFormat,
    /// The config file read, if any.
    pub file: Option<PathBuf>,
    raw: BTreeMap<&'static str, Raw>,
}

/// Loads the configuration: `file` (if any), then environment variables
/// read through `env`, then `flags` (`(key name, value)` pairs).
pub fn load(
    file: Option<&Path>,
    flags: &[(&'static str, String)],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigErrors> {
    let mut errors = Vec::new();
    let file = file.and_then(|path| match std::fs::read_to_string(path) {
        Ok(text) => Some((path, text)),
        Err(e) => {
            errors.push(format!("cannot read config file {}: {e}", path.display()));
            None
        }
    });
    let file = file.as_ref().map(|(path, text)| (*path, text.as_str()));
    load_with(file, flags, env, errors)
}

/// As [`load`], with the config file's text given instead of read: `path`
/// only names it in messages and in [`Settings::file`].
pub fn load_str(
    path: &Path,
    text: &str,
    flags: &[(&'static str, String)],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigErrors> {
    load_with(Some((path, text)), flags, env, Vec::new())
}

fn load_with(
    file: Option<(&Path, &str)>,
    flags: &[(&'static str, String)],
    env: impl Fn(&str) -> Option<String>,
    mut errors: Vec<String>,
) -> Result<Settings, ConfigErrors> {
    let mut raw: BTreeMap<&'static str, Raw> = KEYS
        .iter()
        .map(|k| {
            let value = (k.default)();
            (k.name, Raw::new(value, Source::Default))
        })
        .collect();
    if let Some((path, text)) = file {
        for (name, value) in read_file(path, text, &mut errors) {
            raw.insert(name, Raw::new(Some(value), Source::File(path.to_owned())));
        }
    }
    for k in KEYS {
        // An empty variable counts as unset, as shells often export them so.
        if let Some(v) = env(k.env).filter(|v| !v.is_empty()) {
            raw.insert(k.name, Raw::new(Some(v), Source::Env(k.env)));
        }
    }
    for (name, value) in flags {
        let k = keys::find(name).expect("flags name known keys");
        raw.insert(k.name, Raw::new(Some(value.clone()), Source::Flag(k.flag)));
    }
    let settings = Settings::from_raw(raw, file.map(|(path, _)| path), &mut errors);
    if errors.is_empty() {
        Ok(settings)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Parses the TOML file's `text` into `(key, text)` pairs; problems go to
/// `errors`.
fn read_file(path: &Path, text: &str, errors: &mut Vec<String>) -> Vec<(&'static str, String)> {
    let shown = path.display();
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            // toml's Display draws a multi-line caret diagram; one line
            // with the line number says the same.
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
            errors.push(format!(
                "config file {shown} is not valid TOML{at}: {}",
                e.message().trim().replace('\n', ", ")
            ));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (name, value) in table {
        let Some(k) = keys::find(&name) else {
            let hint = keys::suggest(&name)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            errors.push(format!("config file {shown}: unknown key {name:?}{hint}"));
            continue;
        };
        match toml_text(k, value) {
            Ok(v) => out.push((k.name, v)),
            Err(e) => errors.push(format!("config file {shown}: {}: {e}", k.name)),
        }
    }
    out
}

/// A TOML value as the text an environment variable would hold.
fn toml_text(k: &Key, value: toml::Value) -> Result<String, String> {
    use toml::Value;
    match value {
        Value::String(s) => Ok(s),
        Value::Integer(i) => Ok(i.to_string()),
        Value::Float(f) => Ok(f.to_string()),
        Value::Boolean(b) => Ok(if b { "on" } else { "off" }.to_owned()),
        // backoff = ["1s", "5s"] reads as naturally as "1s,5s".
        Value::Array(items) if k.name == "backoff" => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(format!("list items must be strings, got {other}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.join(",")),
        other => Err(format!(
            "expected a string or a number, got {}",
            other.type_str()
        )),
    }
}

impl Settings {
    fn from_raw(
        raw: BTreeMap<&'static str, Raw>,
        file: Option<&Path>,
        errors: &mut Vec<String>,
    ) -> Self {
        // field!(key, parser, fallback): an unset key or a parse error
        // yields the fallback; an error also records one line naming the
        // key, the (redacted) value and its source.
        let get = |name: &'static str| -> Option<(String, &Raw)> {
            let r = &raw[name];
            r.value.clone().map(|v| (v, r))
        };
        macro_rules! field {
            ($name:literal, $parse:expr, $fallback:expr) => {
                match get($name) {
                    None => $fallback,
                    Some((v, r)) => match $parse(v.as_str()) {
                        Ok(x) => x,
                        Err(e) => {
                            let k = keys::find($name).expect("known key");
                            // Without the query: a misspelt option
                            // (`pasword=`) is not a secret by name, and
                            // the error names the option anyway.
                            let shown = if k.secret {
                                outbox_relay::redact::redact_without_query(&v)
                            } else {
                                v.clone()
                            };
                            errors.push(format!(
                                "{} = {:?} (from {}): {}",
                                $name, shown, r.source, e
                            ));
                            $fallback
                        }
                    },
                }
            };
        }
        let d = RelayConfig::default();
        Self {
            database_url: field!("database_url", |s| parse::database_url(s).map(Some), None),
            schema: field!(
                "schema",
                |s| Schema::new(s).map_err(|e| e.to_string()),
                Schema::default()
            ),
            publisher: field!(
                "publisher",
                parse::publisher,
                keys::DEFAULT_PUBLISHER.to_owned()
            ),
            batch_size: field!(
                "batch_size",
                |s| parse::within(s, &BATCH_SIZE_RANGE),
                d.batch_size
            ),
            max_batch_bytes: field!("max_batch_bytes", parse::bytes, d.max_batch_bytes),
            max_message_bytes: field!("max_message_bytes", parse::bytes, d.max_message_bytes),
            max_attempts: field!(
                "max_attempts",
                |s| parse::within(s, &MAX_ATTEMPTS_RANGE),
                d.retry.max_attempts
            ),
            backoff: field!("backoff", parse::backoff, d.retry.schedule.clone()),
            jitter: field!("jitter", parse::fraction, d.retry.jitter),
            lease: field!(
                "lease",
                parse::duration_at_least(MIN_LEASE, MIN_LEASE_WHY),
                d.lease
            ),
            publish_timeout: field!(
                "publish_timeout",
                parse::duration_at_least(MIN_PUBLISH_TIMEOUT, MIN_PUBLISH_TIMEOUT_WHY),
                d.publish_timeout
            ),
            db_timeout: field!(
                "db_timeout",
                parse::duration_at_least(MIN_DB_TIMEOUT, MIN_DB_TIMEOUT_WHY),
                d.db_timeout
            ),
            ordering: field!("ordering", |s: &str| s.parse(), d.ordering),
            bucket_lease: field!(
                "bucket_lease",
                parse::duration_at_least(MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY),
                d.bucket_lease
            ),
            relay_id: field!("relay_id", relay_id, None),
            notify: field!("notify", parse::switch, d.notify),
            poll_interval: field!("poll_interval", parse::positive_duration, d.idle_sleep),
            reap_interval: field!("reap_interval", parse::positive_duration, d.reap_interval),
            concurrency: field!(
                "concurrency",
                |s| parse::within(s, &CONCURRENCY_RANGE),
                d.concurrency
            ),
            rate_limit: field!(
                "rate_limit",
                |s| parse::optional(s, |s| parse::number(s, 1, u32::MAX)),
                None
            ),
            archive_after: field!(
                "archive_after",
                |s| parse::optional(s, parse::positive_duration),
                None
            ),
            metrics_addr: field!(
                "metrics_addr",
                |s| parse::optional(s, parse::socket_addr),
                None
            ),
            metrics_topics: field!(
                "metrics_topics",
                parse::topic_labels,
                TopicLabels::default()
            ),
            ui_allowed_hosts: field!("ui_allowed_hosts", parse::host_names, Vec::new()),
            log_format: field!("log_format", parse::log_format, LogFormat::default()),
            file: file.map(Path::to_owned),
            raw: raw.clone(),
        }
    }

    /// The relay's configuration.
    pub fn relay_config(&self) -> RelayConfig {
        RelayConfig {
            relay_id: self
                .relay_id
                .clone()
                .unwrap_or_else(outbox_relay::relay::default_relay_id),
            batch_size: self.batch_size,
            lease: self.lease,
            publish_timeout: self.publish_timeout,
            db_timeout: self.db_timeout,
            retry: RetryPolicy {
                schedule: self.backoff.clone(),
                jitter: self.jitter,
                max_attempts: self.max_attempts,
            },
            idle_sleep: self.poll_interval,
            reap_interval: self.reap_interval,
            notify: self.notify,
            concurrency: self.concurrency,
            rate_limit: self.rate_limit,
            archive_after: self.archive_after,
            // Counted only where they are exported.
            gauge_interval: self
                .metrics_addr
                .map(|_| outbox_relay::backlog::Config::default().interval),
            max_batch_bytes: self.max_batch_bytes,
            max_message_bytes: self.max_message_bytes,
            ordering: self.ordering,
            bucket_lease: self.bucket_lease,
            ..RelayConfig::default()
        }
    }

    /// Where `key`'s value came from.
    #[cfg(test)]
    pub fn source(&self, key: &str) -> &Source {
        &self.raw[key].source
    }

    /// The effective configuration as TOML (so it can be saved as a config
    /// file), each line commented with where the value came from.
    /// Passwords are replaced by `***`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for k in KEYS {
            let r = &self.raw[k.name];
            let line = match &r.value {
                None => format!("# {} is not set", k.name),
                Some(v) => {
                    let v = if k.secret {
                        parse::redact(v)
                    } else {
                        v.clone()
                    };
                    // Numbers as TOML numbers (rate_limit may also be "off").
                    let numeric = k.numeric && toml_number(v.trim());
                    if numeric {
                        format!("{} = {}", k.name, v.trim())
                    } else {
                        format!("{} = {}", k.name, toml::Value::String(v))
                    }
                }
            };
            out.push_str(&format!("{line:<48} # {}\n", r.source));
        }
        out
    }
}

/// Whether `s` is a TOML number literal by itself: Rust reads `05`, `.5`
/// and `1.` as numbers, TOML does not, and a rendering must load back.
fn toml_number(s: &str) -> bool {
    use toml::Value;
    format!("n = {s}").parse::<toml::Table>().is_ok_and(|t| {
        t.len() == 1
            && match t.get("n") {
                Some(Value::Integer(_)) => true,
                Some(Value::Float(f)) => f.is_finite(),
                _ => false,
            }
    })
}

fn relay_id(s: &str) -> Result<Option<String>, String> {
    if s.trim().is_empty() || s.len() > 200 {
        return Err("must be 1 to 200 characters".into());
    }
    Ok(Some(s.to_owned()))
}

#[cfg(test)]
mod tests;
