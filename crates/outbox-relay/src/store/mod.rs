//! Every database call of the relay, one function per statement. The SQL
//! text itself lives in `sql` (private to this crate); this module binds
//! parameters and decodes rows. The relay loop holds no SQL.

use crate::{Error, Result};
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use outbox::sql::SchemaVersion;
use outbox::Schema;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod archive;
mod claim;
pub(crate) mod conn;
mod dead;
pub(crate) mod decode;
mod lane;
mod order;
mod sql;
mod stats;
#[cfg(test)]
mod tests;
mod ui;

pub(crate) use archive::{ArchiveBatch, ArchiveBatchParams};
// The relay's public claim cursor reads it (`relay::ClaimSnapshot`).
pub use claim::ClaimSnapshot;
pub(crate) use claim::{Claimed, RawClaim};
pub(crate) use dead::{DeadFilterParams, DeadListParams, ReplayParams};
pub(crate) use lane::{LaneSettle, LaneSettled, LaneWindow};
// Shown by the admin API ([`crate::admin`]).
pub use dead::{DeadMessage, DeadSummary};
pub use decode::{cut, Timestamp};
pub(crate) use order::{BucketSet, BUCKETS};
pub use stats::{Backlog, TopicCounts};
pub use ui::{HotCount, RecentReplay, RegisteredRelay, SentCounters};

use sql::Queries;

/// Default [`Store::with_deadline`]: every statement of the store is
/// bounded by its batch size, so one that has not answered in this long is
/// on a connection that will not answer.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// The relay's handle on the outbox tables of one schema.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    schema: Schema,
    /// The statements over today's table, and over the insert-only
    /// engine's (see [`Self::q`]).
    queries: Arc<(Queries, Queries)>,
    /// The schema has the insert-only engine's lanes (draft migration 12),
    /// as [`Self::check_migrated`] found it.
    lanes: Arc<AtomicBool>,
    /// Whether `lanes` was read from the schema yet.
    lanes_known: Arc<AtomicBool>,
    /// Connections taken to run a statement: what the relay costs the
    /// database (an idle relay should stay near one a second).
    statements: Arc<AtomicU64>,
    /// Longest any one database call may take ([`conn`]).
    deadline: Duration,
}

crate::debug::debug_showing!(Store { schema });

/// Who holds a claim: the relay id and the claim's `locked_at`. Settling
/// requires both to match, so a relay whose rows were reaped and re-claimed
/// (even by a relay of the same id) cannot settle them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// `locked_by`.
    pub relay_id: String,
    /// `locked_at` written by the claim.
    pub locked_at: DateTime<Utc>,
}

/// A claim that filters aggregates out reads at most this many live rows
/// per row it may claim: the filter may pass over a whole backlog (an
/// aggregate in flight, or one waiting behind a failed message), and a
/// claim that reads it all returns nothing for the cost of a full scan.
/// Four: two relays, each owning half the aggregates, still fill a batch.
const SCAN_PER_ROW: i64 = 4;

/// Parameters of [`Store::claim_rows`].
#[derive(Debug, Clone)]
pub struct ClaimParams<'a> {
    /// At most this many rows.
    pub limit: i64,
    /// Written to `locked_by`.
    pub relay_id: &'a str,
    /// Lowest id to read (see the relay's `ClaimCursor`);
    /// `i64::MIN` reads all.
    pub from_id: i64,
    /// The batch stops growing once its rows pass this many bytes; it
    /// always holds at least one row.
    pub max_batch_bytes: i64,
    /// A row larger than this (payload, headers and text columns) is
    /// claimed but not loaded: it comes back in [`Claimed::unloadable`].
    pub max_message_bytes: i64,
    /// With ordering per aggregate on: claim only while registered, and
    /// return each row's aggregate key.
    pub ordered: Option<OrderFilter<'a>>,
}

/// The ordering part of a claim (see the `claim_ordered` statement).
#[derive(Debug, Clone)]
pub struct OrderFilter<'a> {
    /// The relay's registration token.
    pub token: i64,
    /// Buckets owned; `None` when all are.
    pub owned: Option<&'a BucketSet>,
    /// Aggregate keys held back, and for each the highest id let through.
    pub held: &'a [(i64, i64)],
}
#[derive(Debug, Clone)]
pub struct ReapParams<'a> {
    /// A claim older than this has expired.
    pub lease: Duration,
    /// A row at this many attempts goes `dead` instead of `failed`.
    pub max_attempts: i32,
    /// Delay after attempt 1, 2, ...; the last repeats. Must not be empty.
    pub backoff: &'a [Duration],
    /// Fraction of each delay randomised, in `[0, 1)`.
    pub jitter: f64,
}

/// A row the reaper took back from an expired lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Row id.
    pub id: i64,
    /// Whether it went `dead` (max attempts reached) rather than `failed`.
    pub dead: bool,
    /// When it is claimable again (meaningless for a dead row).
    pub next_run_at: DateTime<Utc>,
    /// Its aggregate's key.
    pub key: i64,
}

/// Parameters of [`Store::settle_messages`].
#[derive(Debug, Clone, Default)]
pub struct SettleParams {
    /// Published: move to `messages_sent`.
    pub sent: Vec<i64>,
    /// Retry later: `(id, error, next_run_at)`.
    pub failed: Vec<(i64, String, DateTime<Utc>)>,
    /// Give up: `(id, reason)`.
    pub dead: Vec<(i64, String)>,
    /// Hand back to pending without spending an attempt.
    pub released: Vec<i64>,
    /// Recorded in `last_error` of released rows.
    pub release_reason: String,
}

/// Rows actually settled (rows whose lease was lost are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Marked sent.
    pub sent: u64,
    /// Marked failed, to be retried.
    pub failed: u64,
    /// Marked dead.
    pub dead: u64,
    /// Released to pending.
    pub released: u64,
}

impl Store {
    /// A store over `pool` for the outbox in `schema`.
    pub fn new(pool: Pool, schema: Schema) -> Self {
        Self {
            queries: Arc::new((Queries::new(&schema), Queries::with_retries(&schema))),
            lanes: Arc::new(AtomicBool::new(false)),
            lanes_known: Arc::new(AtomicBool::new(false)),
            pool,
            schema,
            statements: Arc::new(AtomicU64::new(0)),
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// This store with every database call (taking a connection, then the
    /// statement) bounded by `deadline` instead of [`DEFAULT_DEADLINE`].
    pub(crate) fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// A pooled connection for one statement, counted, taken within the
    /// deadline (a pool whose connections all hang, or a server that
    /// accepts TCP and never answers, must not hold the caller).
    async fn client(&self) -> Result<conn::Conn> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.deadline, self.pool.get()).await {
            Ok(obj) => Ok(conn::Conn::new(obj?, self.deadline)),
            Err(_) => Err(Error::DatabaseTimeout(self.deadline)),
        }
    }

    /// The statements for the schema as [`Self::check_migrated`] found it:
    /// over a schema with lanes (the draft migration 12, which renames
    /// today's table `retries`), the claim path's statements read
    /// `retries`. Until the migration is registered, when the files name
    /// `retries` themselves and this goes.
    fn q(&self) -> &Queries {
        match self.lanes.load(Ordering::Relaxed) {
            true => &self.queries.1,
            false => &self.queries.0,
        }
    }

    /// Whether the schema has the insert-only engine's lanes, as
    /// [`Self::check_migrated`] last found it.
    pub(crate) fn lanes(&self) -> bool {
        self.lanes.load(Ordering::Relaxed)
    }

    /// As [`Self::lanes`], read from the schema first if it was not yet.
    pub(crate) async fn has_lanes(&self) -> Result<bool> {
        if !self.lanes_known.load(Ordering::Relaxed) {
            self.recorded_migrations().await?;
        }
        Ok(self.lanes())
    }

    /// Statements this store (and its clones) has sent so far.
    pub fn statements_issued(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The `LISTEN` statement on the channel the insert trigger notifies.
    pub(crate) fn listen_statement(&self) -> &str {
        &self.q().listen
    }

    /// The listener's probe: `NOTIFY` on that channel, payload `$1`.
    pub(crate) fn notify_probe_statement(&self) -> &str {
        &self.q().notify_probe
    }

    /// The connection pool.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Fails unless the schema is at exactly this build's newest migration:
    /// [`Error::NotMigrated`] without outbox tables, [`Error::SchemaBehind`]
    /// when a migration is missing, [`Error::SchemaAhead`] when a newer
    /// build migrated it. Run it before touching the outbox tables.
    pub(crate) async fn check_migrated(&self) -> Result<()> {
        let Some(recorded) = self.recorded_migrations().await? else {
            return Err(Error::NotMigrated(self.schema.to_string()));
        };
        let schema = self.schema.to_string();
        match SchemaVersion::of(&recorded) {
            SchemaVersion::Current(_) => Ok(()),
            SchemaVersion::Behind { at, needs } => Err(Error::SchemaBehind { schema, at, needs }),
            SchemaVersion::Ahead { at, knows } => Err(Error::SchemaAhead { schema, at, knows }),
        }
    }

    /// The migration versions recorded in the schema, or `None` if it has
    /// no outbox tables.
    pub(crate) async fn recorded_migrations(&self) -> Result<Option<Vec<i32>>> {
        let client = self.client().await?;
        let row = client.query_one(&self.q().is_migrated, &[]).await?;
        let (tables, recorded): (bool, bool) = (
            decode::get(&row, "has_tables")?,
            decode::get(&row, "has_migrations")?,
        );
        self.lanes
            .store(decode::get(&row, "has_lanes")?, Ordering::Relaxed);
        self.lanes_known.store(true, Ordering::Relaxed);
        if !tables {
            return Ok(None);
        }
        if !recorded {
            return Ok(Some(Vec::new()));
        }
        let rows = client.query(&self.q().recorded_migrations, &[]).await?;
        let versions = rows.iter().map(|r| decode::get(r, "version"));
        Ok(Some(versions.collect::<Result<_>>()?))
    }

    /// Claims up to `limit` due messages in one statement, the rows not
    /// yet decoded ([`RawClaim::decode`]): what the claim cursor and the
    /// gates need, without the payloads parsed. With ordering on, claims
    /// take turns; decoding after the turn is given back keeps it out of
    /// what they wait for.
    pub(crate) async fn claim_rows(&self, p: ClaimParams<'_>) -> Result<RawClaim> {
        let client = self.client().await?;
        let base: [&dyn conn::Param; 5] = [
            &p.limit,
            &p.relay_id,
            &p.from_id,
            &p.max_batch_bytes,
            &p.max_message_bytes,
        ];
        let rows = match &p.ordered {
            None => client.query(&self.q().claim, &base).await?,
            Some(o) if o.owned.is_none() && o.held.is_empty() => {
                let mut params = base.to_vec();
                params.push(&o.token);
                client.query(&self.q().claim_ordered, &params).await?
            }
            Some(o) => {
                let owned = o.owned.map(BucketSet::as_bytes);
                let (keys, heads): (Vec<i64>, Vec<i64>) = o.held.iter().copied().unzip();
                let scan = p.limit.saturating_mul(SCAN_PER_ROW);
                let mut params = base.to_vec();
                params.extend([&o.token as &dyn conn::Param, &owned, &keys, &heads, &scan]);
                client
                    .query(&self.q().claim_ordered_filtered, &params)
                    .await?
            }
        };
        // The filtered claim answers one row more, with no claimed row in
        // it, when it claimed nothing.
        let scanned_upto = match rows.first() {
            Some(r) if r.columns().iter().any(|c| c.name() == "scanned_upto") => {
                decode::get::<Option<i64>>(r, "scanned_upto")?
            }
            _ => None,
        };
        let snapshot = match rows.first() {
            Some(r) => Some(ClaimSnapshot {
                xmin: decode::get(r, "snapshot_xmin")?,
                xmax: decode::get(r, "snapshot_xmax")?,
            }),
            None => None,
        };
        let mut claimed = Vec::with_capacity(rows.len());
        for r in rows {
            if decode::get::<Option<i64>>(&r, "id")?.is_some() {
                claimed.push(r);
            }
        }
        let rows = claimed;
        let keys = if p.ordered.is_some() {
            rows.iter()
                .map(|r| Ok((decode::get(r, "id")?, decode::get(r, "aggregate_key")?)))
                .collect::<Result<_>>()?
        } else {
            Default::default()
        };
        // `locked_at` is the claim's own now(): always a time chrono holds.
        let lease = match rows.first() {
            Some(r) => Some(Lease {
                relay_id: p.relay_id.to_owned(),
                locked_at: decode::get(r, "locked_at")?,
            }),
            None => None,
        };
        Ok(RawClaim {
            rows,
            lease,
            snapshot,
            keys,
            scanned_upto,
            max_message_bytes: p.max_message_bytes,
        })
    }

    /// Settles a batch in one statement, guarded by the lease.
    ///
    /// A sent row whose id is already in `messages_sent` (written with an
    /// id the sequence had given out) would fail the whole statement on the
    /// sent table's key, and the batch would be published again at every
    /// lease expiry: those rows go dead instead, their reason saying they
    /// were published, and the rest settle as asked.
    pub(crate) async fn settle_messages(&self, lease: &Lease, p: &SettleParams) -> Result<Settled> {
        match self.settle_once(lease, p).await {
            Err(Error::Database(e)) if is_sent_key_clash(&e) => {
                let client = self.client().await?;
                let taken: Vec<i64> = client
                    .query(&self.q().sent_ids_taken, &[&p.sent])
                    .await?
                    .iter()
                    .map(|r| decode::get(r, "id"))
                    .collect::<Result<_>>()?;
                let mut p = p.clone();
                p.sent.retain(|id| !taken.contains(id));
                p.dead.extend(taken.into_iter().map(|id| {
                    let reason = format!(
                        "published, but id {id} is already in messages_sent: kept here, dead, \
                         so that neither row's history is lost"
                    );
                    (id, reason)
                }));
                self.settle_once(lease, &p).await
            }
            other => other,
        }
    }

    async fn settle_once(&self, lease: &Lease, p: &SettleParams) -> Result<Settled> {
        let client = self.client().await?;
        let failed_ids: Vec<i64> = p.failed.iter().map(|f| f.0).collect();
        // Bounded here, where every error reaches the table: a publisher
        // may pass on whatever its destination answered.
        let stored = crate::PublishError::stored;
        let failed_errors: Vec<Cow<'_, str>> = p.failed.iter().map(|f| stored(&f.1)).collect();
        let failed_next: Vec<DateTime<Utc>> = p.failed.iter().map(|f| f.2).collect();
        let (dead_ids, dead_reasons): (Vec<i64>, Vec<Cow<'_, str>>) =
            p.dead.iter().map(|(id, r)| (*id, stored(r))).unzip();
        let release_reason = stored(&p.release_reason);
        let row = client
            .query_one(
                &self.q().settle,
                &[
                    &p.sent,
                    &lease.relay_id,
                    &lease.locked_at,
                    &failed_ids,
                    &failed_errors,
                    &failed_next,
                    &dead_ids,
                    &dead_reasons,
                    &p.released,
                    &release_reason,
                ],
            )
            .await?;
        let count = |name| -> Result<u64> {
            Ok(u64::try_from(decode::get::<i64>(&row, name)?).unwrap_or(0))
        };
        Ok(Settled {
            sent: count("sent")?,
            failed: count("failed")?,
            dead: count("dead")?,
            released: count("released")?,
        })
    }

    /// Extends the lease of the rows of `ids` still held under `lease`.
    /// Returns the new lease, or `None` if no row is held any more.
    pub(crate) async fn extend_lease(&self, lease: &Lease, ids: &[i64]) -> Result<Option<Lease>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &self.q().extend_lease,
                &[&ids, &lease.relay_id, &lease.locked_at],
            )
            .await?;
        match rows.first() {
            Some(r) => Ok(Some(Lease {
                relay_id: lease.relay_id.clone(),
                locked_at: decode::get(r, "locked_at")?,
            })),
            None => Ok(None),
        }
    }

    /// Settles `processing` rows whose claim is older than the lease as a
    /// failed attempt: `failed` with the backoff for their attempts, or
    /// `dead` once max attempts is reached. Live claims are left alone.
    pub(crate) async fn reap_expired_leases(&self, p: &ReapParams<'_>) -> Result<Vec<Reaped>> {
        let client = self.client().await?;
        let steps: Vec<f64> = p.backoff.iter().map(Duration::as_secs_f64).collect();
        let rows = client
            .query(
                &self.q().reap_expired,
                &[&p.lease.as_secs_f64(), &p.max_attempts, &steps, &p.jitter],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Reaped {
                    id: decode::get(r, "id")?,
                    dead: decode::get(r, "dead")?,
                    next_run_at: decode::get(r, "next_run_at")?,
                    key: decode::get(r, "aggregate_key")?,
                })
            })
            .collect()
    }
}

/// Run on each new connection (see [`crate::pool`]): on a `SQL_ASCII`
/// database, no conversion of what the server sends.
pub(crate) fn sql_ascii_raw() -> &'static str {
    sql::SQL_ASCII_RAW
}

/// Whether `e` is a unique violation on `messages_sent`'s key.
fn is_sent_key_clash(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("messages_sent_pkey")
    })
}

/// An age in seconds as the database computed it, never panicking: a
/// producer may write any `created_at`, and from PostgreSQL 17 an age from
/// `-infinity` is `Infinity` seconds (`Duration::from_secs_f64` panics on it).
pub(crate) fn age_seconds(secs: f64) -> Duration {
    // f64::max ignores a NaN: NaN becomes 0.
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX)
}
