//! The effective configuration: defaults, then a TOML file (`--config`,
//! `OUTBOX_CONFIG`), then `OUTBOX_*` environment variables, then flags; the
//! later wins. Every value is checked, and every problem is reported at
//! once (one line each, naming the key, the value and where it came from),
//! before any command touches the database.

mod keys;
pub mod parse;

pub use keys::{help_line, keys, markdown_table, Key, MIN_TOKEN};

use crate::logging::LogFormat;
use outbox::Schema;
use outbox_relay::metrics::TopicLabels;
use outbox_relay::publishers::PublisherSettings;
use outbox_relay::RelayConfig;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
#[derive(Clone)]
struct Raw {
    value: Option<String>,
    source: Source,
}

// The text may be a secret (a token); the typed field shows what it set.
impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Raw({})", self.source)
    }
}

impl Raw {
    fn new(value: Option<String>, source: Source) -> Self {
        Self { value, source }
    }
}

/// A secret value (the operator page's token): never in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value itself, for the one place that compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(outbox_relay::redact::HIDDEN)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// The validated, effective configuration. Each key of [`keys`] sets one
/// field (its `apply`); the relay's own settings go straight into the
/// engine's [`RelayConfig`], so they are not mirrored here.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The outbox database (`None`: not given).
    pub database_url: Option<String>,
    /// The outbox schema.
    pub schema: Schema,
    /// Where the relay publishes.
    pub publisher: String,
    /// Values of the publishers' declared settings (the webhook's), for
    /// the publisher.
    pub publisher_settings: PublisherSettings,
    /// The relay's settings, as the engine takes them (`relay_id` and the
    /// backlog gauges are filled in by [`Settings::relay_config`]).
    pub relay: RelayConfig,
    /// `locked_by`; generated per process when `None`.
    pub relay_id: Option<String>,
    /// Where metrics and health probes are served, if set.
    pub metrics_addr: Option<SocketAddr>,
    /// How topics label `outbox_published_total`.
    pub metrics_topics: TopicLabels,
    /// Names the operator page answers in `Host`, besides IP addresses
    /// and `localhost`.
    pub ui_allowed_hosts: Vec<String>,
    /// The token the operator page's actions need (`None`: read-only).
    pub ui_token: Option<Secret>,
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
    let mut raw: BTreeMap<&'static str, Raw> = keys()
        .iter()
        .map(|k| {
            let value = k.default_value();
            (k.name, Raw::new(value, Source::Default))
        })
        .collect();
    if let Some((path, text)) = file {
        for (name, value) in read_file(path, text, &mut errors) {
            raw.insert(name, Raw::new(Some(value), Source::File(path.to_owned())));
        }
    }
    for k in keys() {
        // An empty variable counts as unset, as shells often export them so.
        if let Some(v) = env(k.env).filter(|v| !v.is_empty()) {
            raw.insert(k.name, Raw::new(Some(v), Source::Env(k.env)));
        }
    }
    for (name, value) in flags {
        let k = keys::find(name).expect("flags name known keys");
        let flag = k.flag.expect("flags name keys with a flag");
        raw.insert(k.name, Raw::new(Some(value.clone()), Source::Flag(flag)));
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
        let mut settings = Self {
            database_url: None,
            schema: Schema::default(),
            publisher: keys::DEFAULT_PUBLISHER.to_owned(),
            publisher_settings: PublisherSettings::new(),
            relay: RelayConfig::default(),
            relay_id: None,
            metrics_addr: None,
            metrics_topics: TopicLabels::default(),
            ui_allowed_hosts: Vec::new(),
            ui_token: None,
            log_format: LogFormat::default(),
            file: file.map(Path::to_owned),
            raw: BTreeMap::new(),
        };
        // Defaults too go through `apply`: the text a default is shown as
        // must mean that default. A bad value records one line naming the
        // key, the (redacted) value and its source, and leaves the default.
        for k in keys() {
            let r = &raw[k.name];
            let Some(v) = &r.value else { continue };
            if let Err(e) = k.apply_to(v, &mut settings) {
                // Without the query: a misspelt option (`pasword=`) is not
                // a secret by name, and the error names the option anyway.
                let shown = if k.secret && !k.hidden {
                    outbox_relay::redact::redact_without_query(v)
                } else {
                    k.shown_value(v)
                };
                errors.push(format!(
                    "{} = {:?} (from {}): {}",
                    k.name, shown, r.source, e
                ));
            }
        }
        settings.raw = raw;
        settings
    }

    /// The relay's configuration.
    pub fn relay_config(&self) -> RelayConfig {
        RelayConfig {
            relay_id: self
                .relay_id
                .clone()
                .unwrap_or_else(outbox_relay::relay::default_relay_id),
            // Counted only where they are exported.
            gauge_interval: self
                .metrics_addr
                .map(|_| outbox_relay::backlog::Config::default().interval),
            ..self.relay.clone()
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
        for k in keys() {
            let r = &self.raw[k.name];
            let line = match &r.value {
                None => format!("# {} is not set", k.name),
                Some(v) => {
                    let v = k.shown_value(v);
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

#[cfg(test)]
mod tests;
