//! The operator page's statements: one function per statement. Every
//! column is read checked ([`decode::get`]): the rows are what producers
//! and relays wrote, and a value Rust's types cannot hold (a timestamp of
//! `'infinity'`, text that is not UTF-8) must show as such, or fail the
//! snapshot with an error naming its column, never panic the page.

use super::decode::{self, Lossy, Timestamp};
use super::Store;
use crate::Result;
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
    pub last_claim: Option<Timestamp>,
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
    pub lease_until: Timestamp,
    /// When it registered.
    pub started_at: Timestamp,
}

/// A row of `dead_replays`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentReplay {
    /// The replay's id.
    pub id: i64,
    /// The message sent back to pending.
    pub message_id: i64,
    /// When.
    pub replayed_at: Timestamp,
    /// Who.
    pub replayed_by: String,
    /// What the message had died of.
    pub dead_reason: Option<String>,
}

impl Store {
    /// Runs one of the page's statements, and
    /// reads each row with `from_row`.
    async fn ui_rows<T>(
        &self,
        sql: &str,
        params: &[&dyn super::conn::Param],
        from_row: impl Fn(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let client = self.client().await?;
        let rows = client.query(sql, params).await?;
        rows.iter().map(from_row).collect()
    }

    /// The hot table by topic, status and (in flight) relay, in one pass.
    pub(crate) async fn ui_hot_counts(&self) -> Result<Vec<HotCount>> {
        self.ui_rows(&self.q().ui.hot_counts, &[], |r| {
            Ok(HotCount {
                topic: decode::get::<Lossy>(r, "topic")?.0,
                status: decode::get::<Lossy>(r, "status")?.0,
                relay: decode::get::<Option<Lossy>>(r, "relay")?.map(|l| l.0),
                count: decode::get(r, "count")?,
                last_claim: decode::get(r, "last_claim")?,
            })
        })
        .await
    }

    /// The sent table's counters.
    pub(crate) async fn ui_sent_counters(&self) -> Result<SentCounters> {
        let client = self.client().await?;
        let row = client.query_opt(&self.q().ui.sent_counters, &[]).await?;
        Ok(match row {
            Some(r) => SentCounters {
                inserted: decode::get(&r, "sent_inserted")?,
                estimate: decode::get(&r, "sent_estimate")?,
            },
            None => SentCounters {
                inserted: None,
                estimate: 0,
            },
        })
    }

    /// The relays registered for ordering per aggregate.
    pub(crate) async fn ui_relays(&self) -> Result<Vec<RegisteredRelay>> {
        self.ui_rows(&self.q().ui.relays, &[], |r| {
            Ok(RegisteredRelay {
                relay_id: decode::get::<Lossy>(r, "relay_id")?.0,
                ordering: decode::get::<Lossy>(r, "ordering")?.0,
                lease_until: decode::get(r, "lease_until")?,
                started_at: decode::get(r, "started_at")?,
            })
        })
        .await
    }

    /// The newest `limit` replays.
    pub(crate) async fn ui_recent_replays(&self, limit: i64) -> Result<Vec<RecentReplay>> {
        self.ui_rows(&self.q().ui.recent_replays, &[&limit], |r| {
            Ok(RecentReplay {
                id: decode::get(r, "id")?,
                message_id: decode::get(r, "message_id")?,
                replayed_at: decode::get(r, "replayed_at")?,
                replayed_by: decode::get::<Lossy>(r, "replayed_by")?.0,
                dead_reason: decode::get::<Option<Lossy>>(r, "dead_reason")?.map(|l| l.0),
            })
        })
        .await
    }
}
