//! Observability statements: one function per statement.

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
    pub async fn count_backlog(&self) -> Result<Backlog> {
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(&self.q.stats.backlog).await?;
        let row = client.query_one(&stmt, &[]).await?;
        Ok(Backlog {
            pending: row.get("pending"),
            processing: row.get("processing"),
            failed: row.get("failed"),
            dead: row.get("dead"),
        })
    }

    /// Every row of the outbox (hot, sent and archived) counted by topic and
    /// status; only `topic` if given. A full count: for `outbox stats`.
    pub async fn count_by_topic(
        &self,
        topic: Option<&str>,
    ) -> Result<BTreeMap<String, TopicCounts>> {
        let client = self.pool.get().await?;
        let rows = client.query(&self.q.stats.by_topic, &[&topic]).await?;
        let mut out: BTreeMap<String, TopicCounts> = BTreeMap::new();
        for r in rows {
            *out.entry(r.get("topic"))
                .or_default()
                .entry(r.get("status"))
                .or_default() += r.get::<_, i64>("count");
        }
        Ok(out)
    }

    /// Age of the oldest message waiting to be published (of `topic`, if given).
    pub async fn oldest_pending_age_of(&self, topic: Option<&str>) -> Result<Option<Duration>> {
        let client = self.pool.get().await?;
        let stmt = client
            .prepare_cached(&self.q.stats.oldest_pending_age)
            .await?;
        let row = client.query_opt(&stmt, &[&topic]).await?;
        Ok(row.map(|r| super::age_seconds(r.get("age_seconds"))))
    }

    /// One round trip to the database: the readiness probe.
    pub async fn ping(&self) -> Result<()> {
        let client = self.pool.get().await?;
        client.simple_query(&self.q.stats.ping).await?;
        Ok(())
    }
}
