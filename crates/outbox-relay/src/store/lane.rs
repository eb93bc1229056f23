//! The hot path's statements (docs/design/insert-only.md): a lane's
//! window, the batch read in it, and the settle that records how far the
//! lane got and copies the rare path's rows into `retries`. No row of
//! `messages` is ever written here.

use super::claim::RawClaim;
use super::{decode, Store};
use crate::Result;
use chrono::{DateTime, Utc};
use std::borrow::Cow;

/// Where a lane reads: its window (what committed after `lo` and is
/// visible in `hi`, both `pg_snapshot` as text) and the walk's position in
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneWindow {
    /// The position read at; the settle inserts `seq + 1`.
    pub seq: i64,
    pub lo: String,
    pub hi: String,
    /// The walk starts after this id.
    pub after_id: i64,
    /// On a tick: the new window holds a row of some lane.
    pub busy: bool,
    /// A row of `retries` is due for the claim path.
    pub retries_due: bool,
}

impl LaneWindow {
    /// The position a settle of this window up to `last_id` inserted.
    pub(crate) fn next(&self, last_id: i64) -> Self {
        Self {
            seq: self.seq + 1,
            lo: self.lo.clone(),
            hi: self.hi.clone(),
            after_id: last_id,
            busy: false,
            retries_due: false,
        }
    }
}

/// A lane's batch, rows not yet decoded, and the rows held back (their
/// aggregate has a live row in `retries`: they go there behind it).
#[derive(Debug, Default)]
pub(crate) struct LaneBatch {
    /// Every row read, the held ones among them.
    pub raw: RawClaim,
    /// Held rows' ids.
    pub held: Vec<i64>,
    /// The highest id read (`None`: nothing was).
    pub last_id: Option<i64>,
    /// How many rows were read.
    pub rows: usize,
}

/// What a lane settle writes besides the position.
#[derive(Debug, Default, Clone)]
pub(crate) struct LaneSettle {
    /// `(id, error, next_run_at)`: into `retries` as `failed`.
    pub failed: Vec<(i64, String, DateTime<Utc>)>,
    /// `(id, reason)`: into `retries` as `dead`.
    pub dead: Vec<(i64, String)>,
    /// Into `retries` as `pending` (behind a live row of their aggregate).
    pub held: Vec<i64>,
}

/// What a lane settle wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LaneSettled {
    /// Whether the position moved (false: the lane's lease was lost).
    pub moved: bool,
    pub failed: u64,
    pub dead: u64,
    pub held: u64,
}

impl Store {
    /// The hot path's backlog (of `topic`, if given): rows the lanes have
    /// not passed, and the age of the oldest (see `lane/pending.sql`).
    pub(crate) async fn lanes_pending(
        &self,
        topic: Option<&str>,
    ) -> Result<(i64, Option<std::time::Duration>)> {
        let client = self.client().await?;
        let r = client.query_one(&self.q().lane.pending, &[&topic]).await?;
        let age: Option<f64> = decode::get(&r, "oldest_age_seconds")?;
        Ok((decode::get(&r, "pending")?, age.map(super::age_seconds)))
    }

    /// Where `lane` reads next: its last position, or with `tick` the next
    /// window after it (see `lane/window.sql`).
    pub(crate) async fn lane_window(&self, lane: i32, tick: bool) -> Result<LaneWindow> {
        let client = self.client().await?;
        let r = client
            .query_one(&self.q().lane.window, &[&lane, &tick])
            .await?;
        Ok(LaneWindow {
            seq: decode::get(&r, "seq")?,
            lo: decode::get(&r, "lo")?,
            hi: decode::get(&r, "hi")?,
            after_id: decode::get(&r, "after_id")?,
            busy: decode::get(&r, "busy")?,
            retries_due: decode::get(&r, "retries_due")?,
        })
    }

    /// The next batch of `lane` in window `w`: at most `limit` rows and
    /// `max_batch_bytes` (at least one row), a row over `max_message_bytes`
    /// read without its content.
    pub(crate) async fn lane_batch(
        &self,
        lane: i32,
        w: &LaneWindow,
        limit: i64,
        max_batch_bytes: i64,
        max_message_bytes: i64,
    ) -> Result<LaneBatch> {
        let client = self.client().await?;
        let rows = client
            .query(
                &self.q().lane.batch,
                &[
                    &lane,
                    &w.lo,
                    &w.hi,
                    &w.after_id,
                    &limit,
                    &max_batch_bytes,
                    &max_message_bytes,
                ],
            )
            .await?;
        let mut held = Vec::new();
        let mut keys = std::collections::HashMap::with_capacity(rows.len());
        let mut last_id = None;
        for r in &rows {
            let id: i64 = decode::get(r, "id")?;
            keys.insert(id, decode::get(r, "aggregate_key")?);
            if decode::get(r, "held")? {
                held.push(id);
            }
            last_id = last_id.max(Some(id));
        }
        Ok(LaneBatch {
            rows: rows.len(),
            raw: RawClaim {
                rows,
                keys,
                max_message_bytes,
                ..RawClaim::default()
            },
            held,
            last_id,
        })
    }

    /// Settles a lane's batch read at `w` up to `last_id`: the position
    /// moves to `w.seq + 1` and `s`'s rows are copied into `retries`, all
    /// or nothing, under relay `relay_id`'s registration `token` and its
    /// lease on the lane. A relay that lost the lane settles nothing: its
    /// statement finds no lease (`moved: false`), or another relay moved
    /// the lane from this position (a unique violation, returned as the
    /// error it is).
    pub(crate) async fn lane_settle(
        &self,
        lane: i32,
        w: &LaneWindow,
        last_id: i64,
        (relay_id, token): (&str, i64),
        s: &LaneSettle,
    ) -> Result<LaneSettled> {
        let client = self.client().await?;
        let stored = crate::PublishError::stored;
        let failed_ids: Vec<i64> = s.failed.iter().map(|f| f.0).collect();
        let failed_errors: Vec<Cow<'_, str>> = s.failed.iter().map(|f| stored(&f.1)).collect();
        let failed_next: Vec<DateTime<Utc>> = s.failed.iter().map(|f| f.2).collect();
        let (dead_ids, dead_reasons): (Vec<i64>, Vec<Cow<'_, str>>) =
            s.dead.iter().map(|(id, r)| (*id, stored(r))).unzip();
        let row = client
            .query_one(
                &self.q().lane.settle,
                &[
                    &lane,
                    &w.seq,
                    &w.lo,
                    &w.hi,
                    &last_id,
                    &relay_id,
                    &token,
                    &failed_ids,
                    &failed_errors,
                    &failed_next,
                    &dead_ids,
                    &dead_reasons,
                    &s.held,
                ],
            )
            .await?;
        let count = |name| -> Result<u64> {
            Ok(u64::try_from(decode::get::<i64>(&row, name)?).unwrap_or(0))
        };
        Ok(LaneSettled {
            moved: count("settled")? > 0,
            failed: count("failed")?,
            dead: count("dead")?,
            held: count("held")?,
        })
    }
}
