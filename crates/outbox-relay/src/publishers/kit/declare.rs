//! A publisher's declaration: its name, the URL schemes it serves, and
//! its options with their docs, written once in its own folder. From it
//! come the scheme match of [`crate::publishers::AnyPublisher`], the
//! unknown-scheme error, the options its URL parser accepts (so an option
//! is accepted exactly when it is documented), the CLI's help, and the
//! option tables of docs/publishers-*.md (a test renders each and finds it
//! there verbatim). A publisher configured outside its URL declares its
//! [`Setting`]s here too: the CLI's key table takes them from the
//! declarations, reads them from the config file, the environment and
//! flags like every other key, and passes their values in
//! [`PublisherSettings`]; this crate reads no environment variable.

use std::collections::BTreeMap;

/// One row of a publisher's option table.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// The option names the row covers ([`ANY_DOTTED`]: every name with a dot).
    pub names: &'static [&'static str],
    /// The default, as the table shows it (markdown).
    pub default: &'static str,
    /// What it does (markdown).
    pub meaning: &'static str,
    /// Read by the broker's client library, not by this crate: left in
    /// the URL it is given.
    pub passthrough: bool,
}

/// In [`Opt::names`]: any option whose name holds a dot (librdkafka's properties).
pub const ANY_DOTTED: &str = "*.";

impl Opt {
    /// An option this crate reads.
    pub const fn new(
        names: &'static [&'static str],
        default: &'static str,
        meaning: &'static str,
    ) -> Self {
        Self {
            names,
            default,
            meaning,
            passthrough: false,
        }
    }

    /// Options the client library reads from the URL.
    pub const fn passed(
        names: &'static [&'static str],
        default: &'static str,
        meaning: &'static str,
    ) -> Self {
        Self {
            passthrough: true,
            ..Self::new(names, default, meaning)
        }
    }
}

/// A publisher, as it declares itself.
#[derive(Debug, Clone, Copy)]
pub struct Declaration {
    /// Its name in errors and logs (`redis`).
    pub name: &'static str,
    /// The schemes it serves (`redis`), without `://`; `postgres` also
    /// names the outbox database itself.
    pub schemes: &'static [&'static str],
    /// Schemes it knows but this build does not serve, each with why: the
    /// error says so rather than "unknown publisher".
    pub not_served: &'static [(&'static str, &'static str)],
    /// One line for help texts.
    pub summary: &'static str,
    /// Its settings given outside the URL (the webhook's, whose query is
    /// the endpoint's own); none for the others.
    pub settings: &'static [Setting],
    /// Its URL options (none for publishers configured otherwise).
    pub options: &'static [Opt],
}

/// A publisher setting given outside its URL, declared once: the CLI's key
/// table makes it a key like any other (config file, environment variable,
/// flag, `config check`, `--help` and the docs table).
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its key in the config file, e.g. `webhook_timeout`.
    pub name: &'static str,
    /// Its environment variable, e.g. `OUTBOX_WEBHOOK_TIMEOUT`.
    pub env: &'static str,
    /// Its flag, e.g. `--webhook-timeout`; none for a secret, as command
    /// lines show in `ps`.
    pub flag: Option<&'static str>,
    /// The default as a user would write it, if it has one.
    pub default: Option<&'static str>,
    /// What unset means, shown where a default would be.
    pub unset: Option<&'static str>,
    /// A secret: its value is never printed, not even in part.
    pub secret: bool,
    /// A number: `config check` writes it as a TOML number.
    pub numeric: bool,
    /// One sentence for `--help`.
    pub help: &'static str,
    /// What it does and accepts (markdown), for the docs tables.
    pub meaning: &'static str,
    /// Checks a value with the parser the publisher reads it with; the
    /// message names neither the setting nor a secret's value.
    pub check: fn(&str) -> Result<(), String>,
}

/// The values given for publishers' [`Setting`]s, by setting name, as the
/// publisher receives them ([`crate::publishers::PublisherContext::settings`]).
/// A setting not given here takes its default.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PublisherSettings(BTreeMap<String, String>);

impl PublisherSettings {
    /// No setting given: every one at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// These settings with `name` set to `value`.
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.0.insert(name.to_owned(), value.into());
    }

    /// The value given for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

// A secret's value (the webhook's signing key) never reaches Debug output.
impl std::fmt::Debug for PublisherSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |name: &str| {
            crate::publishers::declarations()
                .iter()
                .flat_map(|d| d.settings)
                .find(|s| s.name == name)
                .map_or(true, |s| s.secret)
        };
        let mut m = f.debug_map();
        for (k, v) in &self.0 {
            if secret(k) {
                m.entry(k, &crate::redact::HIDDEN);
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

impl Declaration {
    /// Whether a value of `--publisher` with this scheme is this publisher's.
    pub fn claims(&self, scheme: &str) -> bool {
        self.schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme))
            || self
                .not_served
                .iter()
                .any(|(s, _)| s.eq_ignore_ascii_case(scheme))
    }

    /// The names of the options this crate reads (and [`ANY_DOTTED`]).
    pub fn read(&self) -> Vec<&'static str> {
        self.names(false)
    }

    /// The names of the options passed to the client library.
    pub fn passed(&self) -> Vec<&'static str> {
        self.names(true)
    }

    fn names(&self, passthrough: bool) -> Vec<&'static str> {
        self.options
            .iter()
            .filter(|o| o.passthrough == passthrough)
            .flat_map(|o| o.names.iter().copied())
            .collect()
    }

    /// The option table as docs/publishers-*.md shows it.
    pub fn table(&self) -> String {
        let mut out = String::from("| option | default | meaning |\n| --- | --- | --- |\n");
        for o in self.options {
            let names: Vec<String> = o
                .names
                .iter()
                .map(|n| match *n {
                    ANY_DOTTED => "any name with a dot".to_owned(),
                    n => format!("`{n}`"),
                })
                .collect();
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                names.join(", "),
                o.default,
                o.meaning
            ));
        }
        out
    }

    /// The settings table as docs/publishers-*.md shows it.
    pub fn settings_table(&self) -> String {
        let mut out = String::from(
            "| key | env | flag | default | meaning |\n| --- | --- | --- | --- | --- |\n",
        );
        for s in self.settings {
            let default = s
                .default
                .or(s.unset)
                .map_or("—".to_owned(), |d| format!("`{d}`"));
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {default} | {} |\n",
                s.name,
                s.env,
                s.flag.map_or("—".to_owned(), |f| format!("`{f}`")),
                s.meaning
            ));
        }
        out
    }

    /// `scheme://` for each scheme served, as help texts list them.
    pub fn prefixes(&self) -> Vec<String> {
        self.schemes
            .iter()
            .map(|s| match *s {
                "postgres" => "postgres".to_owned(),
                s => format!("{s}://"),
            })
            .collect()
    }
}

/// A publisher type and how it is built from its URL: what the registry
/// in `publishers/mod.rs` needs of it, implemented in its own folder.
pub(crate) trait Declared: crate::Publisher + Sized {
    /// Its declaration.
    const DECLARATION: Declaration;

    /// The publisher a `--publisher` value of its schemes names. Nothing
    /// connects here (the postgres sink's table aside).
    async fn build(url: &str, ctx: &crate::publishers::PublisherContext) -> crate::Result<Self>;

    /// Everything [`Declared::build`] checks, connecting nowhere: what
    /// `outbox config check` runs.
    fn check(url: &str) -> crate::Result<()>;
}
