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

mod table;
pub use table::{MIN_TOKEN, TABLE};

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
