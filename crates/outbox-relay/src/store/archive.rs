//! Archiving statements: one function per statement.

use super::Store;
use crate::Result;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Which rows one archive batch takes, and what it does with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveBatch {
    /// Sent rows (`messages_sent`), moved to `archived_messages`.
    MoveSent,
    /// Sent rows, deleted.
    DeleteSent,
    /// Dead rows (`messages`), moved to `archived_messages`.
    MoveDead,
    /// Dead rows, deleted.
    DeleteDead,
}

/// Parameters of [`Store::archive_batch`].
#[derive(Debug, Clone, Copy)]
pub struct ArchiveBatchParams {
    /// What to do.
    pub kind: ArchiveBatch,
    /// Rows older than this (`sent_at` / `dead_at`).
    pub cutoff: DateTime<Utc>,
    /// At most this many rows.
    pub limit: i64,
}

impl Store {
    /// `now() - older_than` on the database's clock, so the cutoff does not
    /// depend on this machine's clock.
    pub(crate) async fn archive_cutoff(&self, older_than: Duration) -> Result<DateTime<Utc>> {
        let client = self.client().await?;
        let row = client
            .query_one(&self.q().archive.cutoff, &[&older_than.as_secs_f64()])
            .await?;
        super::decode::get(&row, "cutoff")
    }

    /// How many `(sent, dead)` rows are older than `cutoff`.
    pub(crate) async fn count_archivable(&self, cutoff: DateTime<Utc>) -> Result<(u64, u64)> {
        let client = self.client().await?;
        let sent: i64 = super::decode::get(
            &client
                .query_one(&self.q().archive.count_sent, &[&cutoff])
                .await?,
            "count",
        )?;
        let dead: i64 = super::decode::get(
            &client
                .query_one(&self.q().archive.count_dead, &[&cutoff])
                .await?,
            "count",
        )?;
        Ok((sent.max(0) as u64, dead.max(0) as u64))
    }

    /// Moves or deletes one batch in one statement (its own short
    /// transaction); returns the rows it took.
    pub(crate) async fn archive_batch(&self, p: ArchiveBatchParams) -> Result<u64> {
        let q = &self.q().archive;
        let sql = match p.kind {
            ArchiveBatch::MoveSent => &q.move_sent,
            ArchiveBatch::DeleteSent => &q.delete_sent,
            ArchiveBatch::MoveDead => &q.move_dead,
            ArchiveBatch::DeleteDead => &q.delete_dead,
        };
        let client = self.client().await?;
        client.execute(sql, &[&p.cutoff, &p.limit]).await
    }
}
