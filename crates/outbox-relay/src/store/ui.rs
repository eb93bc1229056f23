//! The operator page's statements: one function per statement.

use super::Store;
use crate::Result;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// One group of the hot table: a topic and status, and for rows in flight
/// the relay that holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotCount {
    /// The topic.
    pub topic: String,
    /// `pending`, `processing`, `failed` or `dead`.
    pub status: String,
    /// The claiming relay, for `processing` rows.
    pub relay: Option<String>,
    /// Rows in the group.
    pub count: i64,
    /// The newest claim in the group, for `processing` rows.
    pub last_claim: Option<DateTime<Utc>>,
}

/// What the statistics collector and the planner know of `messages_sent`,
/// without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentCounters {
    /// Rows ever inserted (reset with the statistics); `None` before the
    /// collector has seen the table.
    pub inserted: Option<i64>,
    /// The rows in it now, as the statistics collector counts them.
    pub estimate: i64,
}

/// A relay registered for ordering per aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredRelay {
    /// Its id.
    pub relay_id: String,
    /// Its ordering mode.
    pub ordering: String,
    /// Its lease ends then unless renewed.
    pub lease_until: DateTime<Utc>,
    /// When it registered.
    pub started_at: DateTime<Utc>,
}

/// A row of `dead_replays`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentReplay {
    /// The replay's id.
    pub id: i64,
    /// The message sent back to pending.
    pub message_id: i64,
    /// When.
    pub replayed_at: DateTime<Utc>,
    /// Who.
    pub replayed_by: String,
    /// What the message had died of.
    pub dead_reason: Option<String>,
}

impl Store {
    /// Runs one of the page's statements, prepared once per connection, and
    /// reads each row with `from_row`.
    async fn ui_rows<T>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        from_row: impl Fn(&Row) -> T,
    ) -> Result<Vec<T>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        let rows = client.query(&stmt, params).await?;
        Ok(rows.iter().map(from_row).collect())
    }

    /// The hot table by topic, status and (in flight) relay, in one pass.
    pub async fn ui_hot_counts(&self) -> Result<Vec<HotCount>> {
        self.ui_rows(&self.q.ui.hot_counts, &[], |r| HotCount {
            topic: r.get("topic"),
            status: r.get("status"),
            relay: r.get("relay"),
            count: r.get("count"),
            last_claim: r.get("last_claim"),
        })
        .await
    }

    /// The sent table's counters.
    pub async fn ui_sent_counters(&self) -> Result<SentCounters> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(&self.q.ui.sent_counters).await?;
        let row = client.query_opt(&stmt, &[]).await?;
        Ok(match row {
            Some(r) => SentCounters {
                inserted: r.get("sent_inserted"),
                estimate: r.get("sent_estimate"),
            },
            None => SentCounters {
                inserted: None,
                estimate: 0,
            },
        })
    }

    /// The relays registered for ordering per aggregate.
    pub async fn ui_relays(&self) -> Result<Vec<RegisteredRelay>> {
        self.ui_rows(&self.q.ui.relays, &[], |r| RegisteredRelay {
            relay_id: r.get("relay_id"),
            ordering: r.get("ordering"),
            lease_until: r.get("lease_until"),
            started_at: r.get("started_at"),
        })
        .await
    }

    /// The newest `limit` replays.
    pub async fn ui_recent_replays(&self, limit: i64) -> Result<Vec<RecentReplay>> {
        self.ui_rows(&self.q.ui.recent_replays, &[&limit], |r| RecentReplay {
            id: r.get("id"),
            message_id: r.get("message_id"),
            replayed_at: r.get("replayed_at"),
            replayed_by: r.get("replayed_by"),
            dead_reason: r.get("dead_reason"),
        })
        .await
    }
}
