//! The admin API: what an operator's tools read of an outbox schema
//! (`outbox stats`, `outbox migrate --dry-run`, the operator page, the
//! readiness probe), and the value types they show. The engine's store is
//! private to this crate; [`Admin`] is the part of it other crates may
//! call, each method one of the store's statements, every row read
//! checked. Dead letters and archiving have their own handles
//! ([`DeadLetters`](crate::DeadLetters), [`Archiver`](crate::Archiver));
//! the types they return are here.
//!
//! What a producer wrote is shown as it is: times as [`Timestamp`]
//! (`'infinity'`, years `chrono` cannot hold), text with bytes that are not
//! UTF-8 replaced, values whole. A caller printing a value a producer chose
//! the size of cuts it ([`cut`]). A tool reading rows of its own statements
//! reads them with [`get`], which fails naming the column where
//! `Row::get` panics.

use crate::store::Store;
use crate::Result;
use outbox::Schema;
use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::store::decode::get;
pub use crate::store::{
    cut, Backlog, DeadMessage, DeadSummary, HotCount, RecentReplay, RegisteredRelay, SentCounters,
    Timestamp, TopicCounts,
};

/// The admin reads of one outbox schema, over a [`Store`]'s pool.
#[derive(Debug, Clone)]
pub struct Admin {
    store: Store,
}

impl Admin {
    /// Admin reads over `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        self.store.schema()
    }

    /// Fails unless the schema is at exactly this build's newest migration:
    /// [`Error::NotMigrated`](crate::Error::NotMigrated) without outbox
    /// tables, [`Error::SchemaBehind`](crate::Error::SchemaBehind) when a
    /// migration is missing, [`Error::SchemaAhead`](crate::Error::SchemaAhead)
    /// when a newer build migrated it. Run it before touching the outbox
    /// tables.
    pub async fn check_migrated(&self) -> Result<()> {
        self.store.check_migrated().await
    }

    /// The migration versions recorded in the schema, or `None` if it has
    /// no outbox tables.
    pub async fn recorded_migrations(&self) -> Result<Option<Vec<i32>>> {
        self.store.recorded_migrations().await
    }

    /// One round trip to the database: the readiness probe.
    pub async fn ping(&self) -> Result<()> {
        self.store.ping().await
    }

    /// The hot table's rows by status, as the backlog gauges count them
    /// (cheap: one pass over the live rows, dead ones from their index).
    pub async fn backlog(&self) -> Result<Backlog> {
        self.store.count_backlog().await
    }

    /// Every row of the outbox (hot, sent and archived) counted by topic
    /// and status; only `topic`'s if given. A full count, for
    /// `outbox stats`. Topics differing only in bytes that are not UTF-8
    /// share an entry, their counts added.
    pub async fn count_by_topic(
        &self,
        topic: Option<&str>,
    ) -> Result<BTreeMap<String, TopicCounts>> {
        self.store.count_by_topic(topic).await
    }

    /// Age of the oldest message waiting to be published (of `topic`, if
    /// given): the oldest claimable one, or an older row left `pending` or
    /// `failed` with a `dead_at` (never claimed, so waiting forever). What
    /// `outbox stats` prints and the backlog gauge shows.
    pub async fn oldest_waiting_age(&self, topic: Option<&str>) -> Result<Option<Duration>> {
        self.store.oldest_waiting_age_of(topic).await
    }

    /// Age of the oldest claimable message (of `topic`, if given): one
    /// index scan, for a snapshot that counts its scans (the operator
    /// page). Unlike [`Self::oldest_waiting_age`], a row no relay will
    /// ever claim is not counted.
    pub async fn oldest_claimable_age(&self, topic: Option<&str>) -> Result<Option<Duration>> {
        self.store.oldest_pending_age_of(topic).await
    }

    /// The hot table by topic, status and (rows in flight) claiming relay,
    /// in one pass.
    pub async fn hot_counts(&self) -> Result<Vec<HotCount>> {
        self.store.ui_hot_counts().await
    }

    /// What the statistics collector knows of the sent table, which is not
    /// read.
    pub async fn sent_counters(&self) -> Result<SentCounters> {
        self.store.ui_sent_counters().await
    }

    /// The relays registered for ordering per aggregate.
    pub async fn relays(&self) -> Result<Vec<RegisteredRelay>> {
        self.store.ui_relays().await
    }

    /// The newest `limit` dead-letter replays.
    pub async fn recent_replays(&self, limit: i64) -> Result<Vec<RecentReplay>> {
        self.store.ui_recent_replays(limit).await
    }
}
