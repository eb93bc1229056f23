//! Dead-letter handling: list, show, replay and purge messages that went
//! `dead` (retries used up, or a permanent error). No SQL here: the
//! statements are the store's, private to this crate; the types shown are
//! in [`crate::admin`].
//!
//! A replay is all or nothing: asked to replay ids of which some are not
//! dead (not found, already replayed, archived, never dead), it replays none
//! and says which ones, so an operator never has to work out what a
//! half-applied command did.

use crate::store::{
    DeadFilterParams, DeadListParams, DeadMessage, DeadSummary, ReplayParams, Store,
};
use crate::{Error, Result};
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Which dead messages to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayTarget {
    /// Exactly these ids; all must be dead, or nothing is replayed.
    Ids(Vec<i64>),
    /// Every dead message.
    All,
    /// Every dead message on this topic.
    Topic(String),
    /// Every dead message matching both filters (`None`: any); the text is
    /// a case-insensitive substring of the reason, last error, event type,
    /// aggregate id or payload.
    Matching {
        /// Only this topic.
        topic: Option<String>,
        /// Only messages containing this text.
        text: Option<String>,
    },
}

impl ReplayTarget {
    /// `(ids, topic, text)` filters of the replay statement.
    fn filters(&self) -> (Option<&[i64]>, Option<&str>, Option<&str>) {
        match self {
            ReplayTarget::Ids(ids) => (Some(ids.as_slice()), None, None),
            ReplayTarget::All => (None, None, None),
            ReplayTarget::Topic(t) => (None, Some(t.as_str()), None),
            ReplayTarget::Matching { topic, text } => (None, topic.as_deref(), text.as_deref()),
        }
    }
}

/// An id a replay was asked for that is not a dead message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayed {
    /// The requested id.
    pub id: i64,
    /// Its status, or `None` if no live message has this id (never
    /// existed, purged or archived).
    pub status: Option<String>,
}

impl fmt::Display for NotReplayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            // Dead, yet not replayed: the replay skips rows whose headers
            // or created_at break the schema's rules, since back in pending
            // they would violate its CHECKs.
            Some(s) if s == "dead" => write!(
                f,
                "message {} has headers or a created_at the schema refuses (headers: an object \
                 of strings, no reserved name; created_at: a finite time): fix them, then replay",
                self.id
            ),
            Some(s) => write!(f, "message {} is not dead (status {s})", self.id),
            None => write!(f, "message {} not found", self.id),
        }
    }
}

/// A dead row a list could not read (a value no type here holds): the
/// others are listed, and this one named with its column, so one row never
/// hides the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnreadableRow {
    /// Message id.
    pub id: i64,
    /// The column that could not be read.
    pub column: String,
    /// Why.
    pub reason: String,
}

/// One row of [`DeadLetters::list`]: the message, or why it could not be
/// read.
pub type DeadRow = std::result::Result<DeadMessage, UnreadableRow>;

/// Dead-letter operations over one outbox schema.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    store: Store,
}

impl DeadLetters {
    /// Dead-letter handling over `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Dead messages in id order, optionally of one topic, at most `limit`:
    /// rows with status `dead` or a `dead_at` (a row holding one without
    /// the other, written by hand, is never claimed again). A row that
    /// cannot be read is an [`UnreadableRow`] in its place.
    pub async fn list(&self, topic: Option<&str>, limit: i64) -> Result<Vec<DeadRow>> {
        if limit < 1 {
            return Err(Error::config(format!("limit must be >= 1, got {limit}")));
        }
        self.store
            .list_dead_messages(DeadListParams { topic, limit })
            .await
    }

    /// Dead messages matching the filters (`None`: any; `text` as in
    /// [`ReplayTarget::Matching`]), the newest death first, at most `limit`.
    pub async fn newest(
        &self,
        topic: Option<&str>,
        text: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DeadSummary>> {
        if limit < 1 {
            return Err(Error::config(format!("limit must be >= 1, got {limit}")));
        }
        self.store
            .newest_dead_messages(DeadFilterParams { topic, text }, limit)
            .await
    }

    /// How many dead messages match the filters, as [`Self::newest`] reads them.
    pub async fn count_matching(&self, topic: Option<&str>, text: Option<&str>) -> Result<i64> {
        self.store
            .count_dead_matching(DeadFilterParams { topic, text })
            .await
    }

    /// One dead message with every field (status `dead`, or a `dead_at`
    /// as [`Self::list`] counts it).
    pub async fn show(&self, id: i64) -> Result<DeadMessage> {
        match self.store.get_dead_message(id).await? {
            Some(m) if m.status == "dead" || m.dead_at.is_some() => Ok(m),
            Some(m) => Err(Error::NotDead(vec![NotReplayed {
                id,
                status: Some(m.status),
            }])),
            None => Err(Error::NotDead(vec![NotReplayed { id, status: None }])),
        }
    }

    /// How many dead messages `target` covers that [`Self::replay`] leaves
    /// dead because their headers or created_at break the schema's rules
    /// (rows dead-lettered by migration 6 or 10, or written before them): an
    /// operator fixes them, then replays them.
    pub async fn unreplayable(&self, target: &ReplayTarget) -> Result<i64> {
        let (ids, topic, text) = target.filters();
        self.store
            .count_unreplayable(ReplayParams {
                ids,
                topic,
                replayed_by: None,
                text,
            })
            .await
    }

    /// Sends dead messages back to `pending` (attempts 0, due now, dead
    /// fields cleared) and records each in `dead_replays` with `by` (the
    /// database user if `None`). Returns the replayed ids.
    ///
    /// For [`ReplayTarget::Ids`], every id must be dead; otherwise nothing
    /// changes and the error lists the others ([`Error::NotDead`]).
    pub async fn replay(&self, target: &ReplayTarget, by: Option<&str>) -> Result<Vec<i64>> {
        let mut client = self.store.pool().get().await?;
        match target {
            ReplayTarget::All | ReplayTarget::Topic(_) | ReplayTarget::Matching { .. } => {
                let (_, topic, text) = target.filters();
                let p = ReplayParams {
                    ids: None,
                    topic,
                    replayed_by: by,
                    text,
                };
                self.store.replay_dead_messages(&**client, p).await
            }
            ReplayTarget::Ids(ids) => {
                let mut wanted = ids.clone();
                wanted.sort_unstable();
                wanted.dedup();
                if wanted.is_empty() {
                    return Err(Error::config("no message ids to replay"));
                }
                // One transaction: replay, then roll back unless every id
                // was dead. The statuses are read under the same locks.
                let tx = client.transaction().await?;
                let p = ReplayParams {
                    ids: Some(&wanted),
                    topic: None,
                    replayed_by: by,
                    text: None,
                };
                let replayed = self.store.replay_dead_messages(&*tx, p).await?;
                if replayed.len() == wanted.len() {
                    tx.commit().await?;
                    return Ok(replayed);
                }
                let missing: Vec<i64> = wanted
                    .into_iter()
                    .filter(|id| replayed.binary_search(id).is_err())
                    .collect();
                let statuses = self.store.message_statuses(&*tx, &missing).await?;
                drop(tx); // rolls back
                Err(Error::NotDead(
                    missing
                        .into_iter()
                        .map(|id| NotReplayed {
                            id,
                            status: statuses
                                .iter()
                                .find(|(i, _)| *i == id)
                                .map(|(_, s)| s.clone()),
                        })
                        .collect(),
                ))
            }
        }
    }

    /// Deletes dead messages that went dead more than `older_than` ago.
    pub async fn purge(&self, older_than: Duration) -> Result<u64> {
        self.store.purge_dead_messages(older_than).await
    }
}
