//! A publisher's declaration: its name, the URL schemes it serves, and
//! its options with their docs, written once in its own folder. From it
//! come the scheme match of [`crate::publishers::AnyPublisher`], the
//! unknown-scheme error, the options its URL parser accepts (so an option
//! is accepted exactly when it is documented), the CLI's help, and the
//! option tables of docs/publishers-*.md (a test renders each and finds it
//! there verbatim).

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
    /// Its URL options (none for publishers configured otherwise).
    pub options: &'static [Opt],
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
