//! Observability statements: one function per statement.

use super::decode::{get, Lossy};
use super::Store;
use crate::Result;
use std::collections::BTreeMap;
use std::time::Duration;

/// The hot table's rows by status, as the backlog gauges show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Waiting for their first attempt.
    pub pending: i64,
    /// Claimed by a relay.
    pub processing: i64,
    /// Waiting for a retry.
    pub failed: i64,
    /// Given up on.
    pub dead: i64,
}

impl Backlog {
    /// `(status, count)` pairs, in a fixed order.
    pub fn by_status(&self) -> [(&'static str, i64); 4] {
        [
            ("pending", self.pending),
            ("processing", self.processing),
            ("failed", self.failed),
            ("dead", self.dead),
        ]
    }
}

/// Counts of one topic: status (`pending`, …, `sent`, `archived_sent`,
/// `archived_dead`) → rows.
pub type TopicCounts = BTreeMap<String, i64>;

impl Store {
    /// The hot table's counts by status (cheap: see the `backlog` statement).
    pub(crate) async fn count_backlog(&self) -> Result<Backlog> {
        // Over a schema with lanes, today's table is `retries`, and the
        // hot path's rows not yet passed are pending too.
        let hot = match self.has_lanes().await? {
            true => self.lanes_pending(None).await?.0,
            false => 0,
        };
        let client = self.client().await?;
        let row = client.query_one(&self.q().stats.backlog, &[]).await?;
        Ok(Backlog {
            pending: hot + get::<i64>(&row, "pending")?,
            processing: get(&row, "processing")?,
            failed: get(&row, "failed")?,
            dead: get(&row, "dead")?,
        })
    }

    /// Every row of the outbox (hot, sent and archived) counted by topic and
    /// status; only `topic` if given. A full count: for `outbox stats`.
    pub(crate) async fn count_by_topic(
        &self,
        topic: Option<&str>,
    ) -> Result<BTreeMap<String, TopicCounts>> {
        let client = self.client().await?;
        let rows = client.query(&self.q().stats.by_topic, &[&topic]).await?;
        let mut out: BTreeMap<String, TopicCounts> = BTreeMap::new();
        for r in rows {
            // Lossy: two topics differing only in bytes that are not UTF-8
            // share a line, their counts added.
            *out.entry(get::<Lossy>(&r, "topic")?.0)
                .or_default()
                .entry(get::<Lossy>(&r, "status")?.0)
                .or_default() += get::<i64>(&r, "count")?;
        }
        Ok(out)
    }

    /// Age of the oldest claimable message waiting to be published (of
    /// `topic`, if given), from the claimable index: one index scan, for
    /// the operator page's snapshot, which counts its scans.
    pub(crate) async fn oldest_pending_age_of(
        &self,
        topic: Option<&str>,
    ) -> Result<Option<Duration>> {
        Ok(self
            .oldest_of(&self.q().stats.oldest_pending_age, topic)
            .await?
            .map(|(_, age)| super::age_seconds(age)))
    }

    /// Age of the oldest message waiting to be published (of `topic`, if
    /// given): the oldest claimable one, or an older row left `pending` or
    /// `failed` with a `dead_at` (never claimed, so waiting forever). For
    /// `outbox stats` and the backlog gauge.
    pub(crate) async fn oldest_waiting_age_of(
        &self,
        topic: Option<&str>,
    ) -> Result<Option<Duration>> {
        // Two statements, not one: the first keeps its plan (the claimable
        // index, read from its start); the second reads the dead index.
        let claimable = self
            .oldest_of(&self.q().stats.oldest_pending_age, topic)
            .await?;
        let stuck = self
            .oldest_of(&self.q().stats.oldest_pending_with_dead_at, topic)
            .await?;
        let oldest = match (claimable, stuck) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        let oldest = oldest.map(|(_, age)| super::age_seconds(age));
        // Over a schema with lanes, the hot path's oldest row not passed.
        let hot = match self.has_lanes().await? {
            true => self.lanes_pending(topic).await?.1,
            false => None,
        };
        Ok(oldest.max(hot))
    }

    /// `(id, age_seconds)` of the row `sql` (one of the oldest-pending
    /// statements) finds.
    async fn oldest_of(&self, sql: &str, topic: Option<&str>) -> Result<Option<(i64, f64)>> {
        let client = self.client().await?;
        client
            .query_opt(sql, &[&topic])
            .await?
            .map(|r| Ok((get::<i64>(&r, "id")?, get::<f64>(&r, "age_seconds")?)))
            .transpose()
    }

    /// One round trip to the database: the readiness probe.
    pub(crate) async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        client.simple(&self.q().stats.ping).await
    }
}
