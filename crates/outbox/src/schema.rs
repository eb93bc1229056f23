//! Validated SQL identifiers. The schema name is the only thing ever spliced
//! into SQL text; every value travels as a bound parameter.

use crate::{Error, Result};
use std::fmt;

/// The default schema, `outbox`.
pub const DEFAULT_SCHEMA: &str = "outbox";

/// A validated PostgreSQL schema name.
///
/// ```
/// use outbox::Schema;
/// assert_eq!(Schema::new("billing_outbox").unwrap().quoted(), "\"billing_outbox\"");
/// assert!(Schema::new("x; DROP TABLE users").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schema(String);

impl Schema {
    /// Validates `name`: lowercase ASCII letters, digits and `_`, starting
    /// with a letter or `_`, at most 63 bytes, not `pg_*` (reserved by
    /// PostgreSQL). Mixed case is refused rather than silently folded.
    pub fn new(name: &str) -> Result<Self> {
        validate_identifier(name)?;
        Ok(Self(name.to_owned()))
    }

    /// The bare name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The channel the relay LISTENs on and the insert trigger notifies
    /// (`outbox_<schema>`, cut to PostgreSQL's 63-byte identifier limit).
    pub fn notify_channel(&self) -> String {
        let mut c = format!("outbox_{}", self.0);
        c.truncate(63);
        c
    }

    /// The name quoted for splicing into SQL.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

impl Default for Schema {
    fn default() -> Self {
        Self(DEFAULT_SCHEMA.to_owned())
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Schema {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

/// Checks that `name` is a plain lowercase SQL identifier.
pub fn validate_identifier(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidIdentifier {
            name: name.to_owned(),
            reason,
        })
    };
    let Some(first) = name.chars().next() else {
        return bad("it is empty");
    };
    if name.len() > 63 {
        return bad("it is longer than 63 bytes");
    }
    if !(first.is_ascii_lowercase() || first == '_') {
        return bad("it must start with a lowercase letter or underscore");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return bad("only lowercase letters, digits and underscores are allowed");
    }
    if name.starts_with("pg_") {
        return bad("names starting with pg_ are reserved by PostgreSQL");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names() {
        for ok in ["outbox", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(Schema::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "1abc",
            "Outbox",
            "out-box",
            "a b",
            "x\"; drop schema public; --",
            "pg_catalog",
            "é",
            &"a".repeat(64),
        ] {
            let err = Schema::new(bad).unwrap_err();
            assert!(
                err.to_string().contains("invalid schema name"),
                "{bad}: {err}"
            );
        }
    }
}
