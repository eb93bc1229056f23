//! Checked reads of the outbox's rows. The table is an API: a role with
//! INSERT or UPDATE rights can write any value its column's type allows,
//! and PostgreSQL accepts values Rust's types cannot hold (`'infinity'` and
//! years past 262143 in a `timestamptz`, numbers beyond a 64-bit float and
//! any nesting depth in a `jsonb`, bytes that are not UTF-8 in a `SQL_ASCII`
//! database). Every read here returns an error naming its column instead of
//! panicking as `Row::get` does, and the types below hold what the
//! standard ones cannot:
//! - [`Timestamp`]: any `timestamptz`, infinities and out-of-range years
//!   included;
//! - [`Payload`](crate::message::Payload): a `jsonb` as its JSON text,
//!   never re-parsed into numbers or a tree;
//! - [`Lossy`]: text for showing, with bytes that are not UTF-8 replaced.

use crate::{Error, Result};
use chrono::{DateTime, TimeZone, Utc};
use std::fmt;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::Row;

/// `column` of `row` as a `T`, or [`Error::Decode`] naming the column.
pub fn get<'a, T: FromSql<'a>>(row: &'a Row, column: &str) -> Result<T> {
    row.try_get(column).map_err(|e| decode_error(column, &e))
}

/// The error of a failed read of `column`, with the driver's reason.
pub(crate) fn decode_error(column: &str, e: &tokio_postgres::Error) -> Error {
    use std::error::Error as _;
    // The driver's own text is "error deserializing column N"; its source
    // says why.
    let reason = match e.source() {
        Some(s) => match s.downcast_ref::<std::str::Utf8Error>() {
            Some(u) => not_utf8(u),
            None => s.to_string(),
        },
        None => e.to_string(),
    };
    Error::Decode {
        column: column.to_owned(),
        reason,
    }
}

/// Any `timestamptz` (or `timestamp`, read as UTC) PostgreSQL can store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timestamp {
    /// `'-infinity'`.
    NegInfinity,
    /// A time `chrono` can hold.
    At(DateTime<Utc>),
    /// A finite time beyond what `chrono` holds (before year -262143 or
    /// after 262143): microseconds since 2000-01-01 UTC, as stored.
    OutOfRange(i64),
    /// `'infinity'`.
    Infinity,
}

impl Timestamp {
    /// The time, when it is finite and within `chrono`'s range.
    pub fn at(self) -> Option<DateTime<Utc>> {
        match self {
            Self::At(t) => Some(t),
            _ => None,
        }
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Self {
        Self::At(t)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NegInfinity => f.write_str("-infinity"),
            Self::Infinity => f.write_str("infinity"),
            Self::At(t) => f.write_str(&t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            Self::OutOfRange(us) => {
                // Whole Gregorian years are 365.2425 days on average.
                let years = *us as f64 / 1e6 / 86_400.0 / 365.2425;
                write!(f, "year {:.0} (out of range)", 2000.0 + years)
            }
        }
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            // As `DateTime<Utc>` serializes: what JSON readers had before.
            Self::At(t) => t.serialize(s),
            other => s.collect_str(other),
        }
    }
}

/// Microseconds from 2000-01-01 UTC, PostgreSQL's epoch, to the time.
fn pg_epoch() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .expect("2000-01-01 is a valid UTC time")
}

impl<'a> FromSql<'a> for Timestamp {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 8] = raw
            .try_into()
            .map_err(|_| format!("a timestamp of {} bytes, not 8", raw.len()))?;
        let us = i64::from_be_bytes(bytes);
        Ok(match us {
            i64::MAX => Self::Infinity,
            i64::MIN => Self::NegInfinity,
            _ => pg_epoch()
                .checked_add_signed(chrono::Duration::microseconds(us))
                .map_or(Self::OutOfRange(us), Self::At),
        })
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::TIMESTAMP
    }
}

/// Text to show: bytes that are not UTF-8 (a `SQL_ASCII` database stores
/// any) become U+FFFD instead of failing the read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lossy(pub String);

impl<'a> FromSql<'a> for Lossy {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Self(String::from_utf8_lossy(raw).into_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql<'_>>::accepts(ty)
    }
}

/// A `json` or `jsonb` value to show: as [`Payload`](crate::message::Payload),
/// with bytes that are not UTF-8 replaced by U+FFFD (inside a JSON string,
/// where `jsonb` keeps them, the text stays one JSON value).
#[derive(Debug, Clone, PartialEq)]
pub struct LossyPayload(pub crate::message::Payload);

impl<'a> FromSql<'a> for LossyPayload {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = json_text(ty, raw)?;
        let text = String::from_utf8_lossy(&text).into_owned();
        Ok(Self(crate::message::Payload::from_json(text)?))
    }

    fn accepts(ty: &Type) -> bool {
        is_json(ty)
    }
}

/// The JSON text of a `json` or `jsonb` value as the server sent it: the
/// version byte of `jsonb`'s binary form taken off, nothing parsed.
pub(crate) fn json_text(ty: &Type, raw: &[u8]) -> std::result::Result<Vec<u8>, String> {
    if *ty == Type::JSONB {
        match raw.split_first() {
            Some((1, text)) => Ok(text.to_vec()),
            Some((v, _)) => Err(format!("jsonb binary format version {v}, not 1")),
            None => Err("an empty jsonb value".to_owned()),
        }
    } else {
        Ok(raw.to_vec())
    }
}

/// Whether `ty` is `json` or `jsonb`.
pub(crate) fn is_json(ty: &Type) -> bool {
    *ty == Type::JSON || *ty == Type::JSONB
}

/// Where the first byte that is not UTF-8 is in `bytes`, as a reason.
pub(crate) fn not_utf8(e: &std::str::Utf8Error) -> String {
    format!("not valid UTF-8 (byte {})", e.valid_up_to())
}

/// `text` cut to at most `max` bytes at a character boundary, with a
/// marker saying how much was cut: for every value shown to an operator,
/// whose size a producer chose.
pub fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(us: i64) -> Timestamp {
        Timestamp::from_sql(&Type::TIMESTAMPTZ, &us.to_be_bytes()).unwrap()
    }

    #[test]
    fn every_stored_timestamp_decodes() {
        assert_eq!(ts(i64::MAX), Timestamp::Infinity);
        assert_eq!(ts(i64::MIN), Timestamp::NegInfinity);
        assert_eq!(ts(0).at(), Some(pg_epoch()));
        assert_eq!(ts(0).to_string(), "2000-01-01T00:00:00Z");
        // About year 294264, near the largest PostgreSQL stores.
        let far = ts(9_223_000_000_000_000_000);
        assert!(matches!(far, Timestamp::OutOfRange(_)), "{far:?}");
        assert!(far.to_string().contains("out of range"), "{far}");
        assert!(Timestamp::from_sql(&Type::TIMESTAMPTZ, &[1, 2]).is_err());
    }

    #[test]
    fn text_is_cut_at_a_char_boundary_with_a_marker() {
        assert_eq!(cut("short", 10), "short");
        let c = cut("ééé", 3);
        assert_eq!(c, "é… [4 bytes cut]");
    }

    #[test]
    fn lossy_text_replaces_what_is_not_utf8() {
        let l = Lossy::from_sql(&Type::TEXT, b"a\xffb").unwrap();
        assert_eq!(l.0, "a\u{fffd}b");
    }
}
