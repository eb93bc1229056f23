//! A claim's answer and how its rows are read: each column checked, a row
//! that cannot be loaded (over the max message size, or holding a value
//! this build cannot read) set apart with its reason, never failing the
//! claim ([`RawClaim::decode`]).

use super::decode::{self, Timestamp};
use super::Lease;
use crate::{Error, Message, Payload, Result};
use std::collections::BTreeMap;
use tokio_postgres::Row;

/// The snapshot a claim ran under (`pg_current_snapshot()`), as 64-bit
/// transaction ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimSnapshot {
    /// Oldest transaction still running.
    pub xmin: i64,
    /// First transaction id not yet assigned.
    pub xmax: i64,
}

/// A claimed batch: messages in id order and the lease they share.
#[derive(Debug, Clone, Default)]
pub struct Claimed {
    /// The claimed rows.
    pub messages: Vec<Message>,
    /// `None` when nothing was claimed.
    pub lease: Option<Lease>,
    /// Claimed rows that cannot be published as they are, with the reason
    /// (headers that break the envelope's rule); they are in `messages` too,
    /// with no headers, and must be dead-lettered rather than published.
    pub refused: Vec<(i64, String)>,
    /// Rows claimed that cannot be loaded, `(id, reason)`, held under the
    /// same lease, not in `messages`: larger than the max message size
    /// (never read), or holding a value this build cannot read (a column
    /// named in the reason). No retry changes either: they go dead.
    pub unloadable: Vec<(i64, String)>,
    /// With ordering on: the aggregate key of every row claimed (in
    /// `messages` or `too_large`), by id.
    pub keys: std::collections::HashMap<i64, i64>,
    /// A claim that filtered aggregates out: the highest id it read and
    /// took all it could of, claimed or not (passed over by the filter,
    /// locked, or not due). `None` when it was cut short by the limit or the
    /// byte budget, read nothing, or did not filter. The claim floor may
    /// pass it even when nothing was claimed.
    pub scanned_upto: Option<i64>,
}

/// A claim's answer with its rows not yet decoded ([`Store::claim_rows`]):
/// what the claim cursor and the gates read, then [`Self::decode`].
#[derive(Debug, Default)]
pub struct RawClaim {
    pub(super) rows: Vec<Row>,
    /// As [`Claimed::lease`].
    pub lease: Option<Lease>,
    /// The snapshot the claim ran under; `None` when nothing was claimed
    /// (a filtered claim always has one: see `scanned_upto`).
    pub snapshot: Option<ClaimSnapshot>,
    /// As [`Claimed::keys`].
    pub keys: std::collections::HashMap<i64, i64>,
    /// As [`Claimed::scanned_upto`].
    pub scanned_upto: Option<i64>,
    /// The claim's max message size, for the reason of a row over it.
    pub(super) max_message_bytes: i64,
}

/// The lowest and highest of `ids`.
fn id_span(ids: impl Iterator<Item = i64>) -> Option<(i64, i64)> {
    ids.fold(None, |r, id| match r {
        None => Some((id, id)),
        Some((lo, hi)) => Some((lo.min(id), hi.max(id))),
    })
}

impl RawClaim {
    /// The lowest and highest id claimed, payload loaded or not.
    pub fn id_range(&self) -> Option<(i64, i64)> {
        id_span(
            self.rows
                .iter()
                .filter_map(|r| r.try_get::<_, i64>("id").ok()),
        )
    }

    /// The claimed messages, in id order, each checked: a row that cannot
    /// be read or is over the max message size comes back in
    /// [`Claimed::unloadable`], one whose headers break the envelope's rule
    /// in [`Claimed::refused`]. One bad row never fails the claim.
    pub fn decode(self) -> Claimed {
        let (mut messages, mut unloadable) = (Vec::with_capacity(self.rows.len()), Vec::new());
        let mut refused = Vec::new();
        for r in &self.rows {
            match claimed_row(r, self.max_message_bytes) {
                Ok(ClaimedRow::Message(m, problem)) => {
                    if let Some(reason) = problem {
                        refused.push((m.id, reason));
                    }
                    messages.push(m);
                }
                Ok(ClaimedRow::Unloadable(id, reason)) => unloadable.push((id, reason)),
                // Only a claimed row's id itself unreadable gets here, which
                // its type (`int8 NOT NULL`) rules out: skipped, the lease
                // reaper takes it back.
                Err(e) => tracing::error!(error = %e, "a claimed row without a readable id"),
            }
        }
        // UPDATE ... RETURNING does not keep the CTE's order.
        messages.sort_unstable_by_key(|m| m.id);
        unloadable.sort_unstable();
        Claimed {
            messages,
            lease: self.lease,
            refused,
            unloadable,
            keys: self.keys,
            scanned_upto: self.scanned_upto,
        }
    }
}

/// A claimed row as the relay takes it.
enum ClaimedRow {
    /// Loaded, and why it cannot be published if it cannot.
    Message(Message, Option<String>),
    /// Not loaded (over the max message size) or not readable: `(id, reason)`.
    Unloadable(i64, String),
}

/// Reads a claimed row. Every column is read checked: any value the
/// column's type allows either loads or makes the row alone unloadable,
/// the column named. Only the id, which the claim itself produced, must read.
fn claimed_row(r: &Row, max_message_bytes: i64) -> Result<ClaimedRow> {
    let id: i64 = decode::get(r, "id")?;
    let size: i64 = decode::get(r, "message_bytes").unwrap_or(i64::MAX);
    if size > max_message_bytes {
        let payload = decode::get::<Option<i64>>(r, "payload_bytes")
            .ok()
            .flatten()
            .map_or_else(String::new, |p| format!(" (payload {p} bytes)"));
        return Ok(ClaimedRow::Unloadable(
            id,
            format!(
                "message of {size} bytes{payload} exceeds the limit of {max_message_bytes} bytes"
            ),
        ));
    }
    let loaded = (|| -> Result<(Message, Option<String>)> {
        let created_at = match decode::get::<Timestamp>(r, "created_at")? {
            Timestamp::At(t) => t,
            other => {
                return Err(Error::Decode {
                    column: "created_at".into(),
                    reason: format!("{other} cannot be carried in the envelope"),
                })
            }
        };
        let headers: Payload = decode::get(r, "headers")?;
        let (headers, problem) = match serde_json::from_str(headers.get())
            .map_err(|e| format!("headers cannot be read: {e}"))
            .and_then(crate::message::decode_headers)
        {
            Ok(h) => (h, None),
            Err(reason) => (BTreeMap::new(), Some(reason)),
        };
        let m = Message {
            id,
            event_id: decode::get(r, "event_id")?,
            event_type: decode::get(r, "event_type")?,
            event_version: decode::get(r, "event_version")?,
            aggregate_type: decode::get(r, "aggregate_type")?,
            aggregate_id: decode::get(r, "aggregate_id")?,
            topic: decode::get(r, "topic")?,
            payload: decode::get(r, "payload")?,
            headers,
            attempts: decode::get(r, "attempts")?,
            created_at,
        };
        Ok((m, problem))
    })();
    Ok(match loaded {
        Ok((m, problem)) => ClaimedRow::Message(m, problem),
        Err(e) => ClaimedRow::Unloadable(id, e.to_string()),
    })
}
