//! What the publishers share, so each publisher folder keeps only what is
//! specific to its broker:
//!
//! - [`declare`]: how a publisher declares itself (schemes, options and
//!   their docs), once, in its folder;
//! - [`options`]: the one parser of a destination URL and its `?key=value`
//!   options, with passwords redacted from every error it writes;
//! - [`record`]: the envelope as named text fields (metadata, `headers` as
//!   JSON) and the payload as text, the shape Redis entries, NATS headers and
//!   Kafka headers all carry;
//! - [`lazy`]: a connection opened on first use and dropped after a
//!   connection error, so the next batch reconnects;
//! - [`outcome`]: building a batch's outcomes when some messages were
//!   refused before sending and the rest share one round trip.
//!
//! Limits every destination checks before sending are in `limits.rs`.

// Each publisher uses a subset: a build with one publisher feature leaves
// the rest unused.
#![allow(dead_code)]

pub(crate) mod declare;
pub(crate) mod lazy;
// The one module that needs the `url` crate, which only the URL-configured
// publishers pull in (not `postgres`: tokio-postgres reads its own URLs).
#[cfg(feature = "url-options")]
pub(crate) mod options;
pub(crate) mod outcome;
pub(crate) mod record;
