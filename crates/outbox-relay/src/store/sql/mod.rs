//! Every statement the relay engine runs, rendered once per schema with
//! `outbox::sql::render`. Each field documents its parameters and result
//! columns; the functions of [`super`] run them and decode the rows. The
//! schema and its migrations belong to the `outbox` library.

mod archive;
mod dead;
mod stats;
mod ui;

pub(crate) use archive::ArchiveQueries;
pub(crate) use dead::DeadQueries;
pub(crate) use stats::StatsQueries;
pub(crate) use ui::UiQueries;

use outbox::sql::render;
use outbox::Schema;

/// Run once per new connection: a `SQL_ASCII` database stores any byte,
/// and the server refuses to send one that is not UTF-8 to a UTF-8 client
/// (failing the whole statement); a `SQL_ASCII` client gets the bytes as
/// stored. Any other database keeps UTF-8, converted by the server.
pub(crate) const SQL_ASCII_RAW: &str = "DO $enc$ BEGIN \
       IF current_setting('server_encoding') = 'SQL_ASCII' THEN SET client_encoding = 'SQL_ASCII'; END IF; \
     END $enc$";

/// Columns the relay reads for each claimed message, by name. A row larger
/// than the claim's max message size (`b.size`, see [`ROW_BYTES`]) is
/// claimed (to be dead-lettered) but never loaded: its producer-sized
/// columns are NULL, and `payload_bytes` says how much of it is payload.
const CLAIM_COLUMNS: &str = "m.id, m.event_id, \
     CASE WHEN b.size <= $5 THEN m.event_type END AS event_type, m.event_version, \
     CASE WHEN b.size <= $5 THEN m.aggregate_type END AS aggregate_type, \
     CASE WHEN b.size <= $5 THEN m.aggregate_id END AS aggregate_id, \
     CASE WHEN b.size <= $5 THEN m.topic END AS topic, \
     CASE WHEN b.size <= $5 THEN m.payload END AS payload, \
     CASE WHEN b.size <= $5 THEN m.headers END AS headers, \
     m.attempts, m.created_at, m.locked_at, b.size AS message_bytes, \
     CASE WHEN b.size > $5 THEN octet_length(m.payload::text)::int8 END AS payload_bytes";

/// A row's size as the relay would load it: every column a producer sizes
/// (payload and headers as JSON text, the four text columns). Counting the
/// payload alone let twenty rows with 10 MiB headers take 832 MiB with a
/// 1 MiB batch budget. `octet_length` of a text column reads its stored
/// length without detoasting it; the JSON columns are rendered.
const ROW_BYTES: &str = "(octet_length(payload::text) + octet_length(headers::text) \
     + octet_length(topic) + octet_length(event_type) \
     + octet_length(aggregate_type) + octet_length(aggregate_id))::int8";

/// The relay's statements for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Queries {
    /// Claim a batch: `$1 int8 limit, $2 relay id, $3 int8 lowest id to
    /// read, $4 int8 batch byte budget, $5 int8 max message bytes` →
    /// [`CLAIM_COLUMNS`], then the claim snapshot's `snapshot_xmin` and
    /// `snapshot_xmax` (`int8`). Claimable means pending,
    /// or failed and due. `SKIP LOCKED` lets many relays claim disjoint
    /// batches without waiting on each other. The snapshot tells the relay
    /// when no transaction that was running at the claim can still commit a
    /// row below what it claimed.
    ///
    /// The batch stops growing once its rows pass the byte budget (the
    /// first row is always taken), and a row over the max message size is
    /// not loaded, so what one claim loads into the relay is bounded
    /// whatever a producer wrote. The size is [`ROW_BYTES`], what the relay
    /// receives: `pg_column_size` would be cheaper but is the stored size,
    /// which compression can make a hundred times smaller.
    ///
    /// `attempts` stops at the integer maximum rather than overflowing: one
    /// row at `2147483647` failed every claim of every relay.
    /// Window functions cannot share a SELECT with `FOR UPDATE`: rows are
    /// locked in `c`, budgeted in `b`, and only the budgeted ones updated;
    /// the rest are unlocked at commit, unchanged.
    pub(crate) claim: String,
    /// The claim with ordering per aggregate on: the parameters of
    /// [`Self::claim`], then `$6 int8` the relay's token. Claims nothing
    /// unless the relay is registered under that token with a live lease,
    /// and holds its row in `relays` FOR SHARE until it commits (see
    /// migration 7). Returns [`Self::claim`]'s columns, then the row's
    /// `aggregate_key` (`int8`).
    pub(crate) claim_ordered: String,
    /// [`Self::claim_ordered`] taking only rows of the buckets this relay
    /// owns whose aggregate is not held back: `$7 bytea` owned buckets (a
    /// 1,024-bit map; NULL: all), `$8 int8[]`
    /// keys held back, `$9 int8[]` the highest id let through for each,
    /// `$10 int8` how many live rows from `$3` it may read. Returns one row
    /// more (or only that row, when nothing was claimed), its claimed
    /// columns NULL, and every row carries `scanned_upto` (`int8` or NULL):
    /// the highest id the claim read and could have taken, so a claim that
    /// filtered out everything it read still moves the floor.
    pub(crate) claim_ordered_filtered: String,
    /// One heartbeat (`relay_heartbeat` in migration 7): `$1 relay id,
    /// $2 int8 token, $3 ordering, $4 float8 lease seconds` →
    /// `(bucket int4 or NULL, gained, renewed, other_modes int8)`.
    pub(crate) relay_heartbeat: String,
    /// A relay leaving: `$1 relay id, $2 int8 token`; its buckets are free
    /// at once.
    pub(crate) relay_leave: String,
    /// The aggregates of buckets `$1 bytea` (a 1,024-bit map) that have a
    /// live message not claimable now (in flight, or failed and waiting)
    /// → `(aggregate_key int8, lowest_id int8)`: what a relay taking the
    /// buckets over must hold back. Scans the hot table: run at takeover.
    pub(crate) held_in_buckets: String,
    /// For each `($1 int8[] keys, $2 int8[] ids)`, the aggregate's lowest
    /// live message at or above the id → `(aggregate_key, from_id,
    /// lowest_id int8 or NULL)`.
    /// A range scan from the id: one row when it is still live.
    pub(crate) next_live: String,
    /// Settle a batch in one round trip. The lease is `(locked_by, locked_at)`:
    /// `$1 int8[] sent ids, $2 relay id, $3 timestamptz claimed locked_at,
    /// $4 int8[] failed ids, $5 text[] errors, $6 timestamptz[] next_run_at,
    /// $7 int8[] dead ids, $8 text[] reasons, $9 int8[] released ids,
    /// $10 text release reason` → `(sent, failed, dead, released)`, counts of
    /// rows actually settled. Rows whose lease is no longer ours are left alone.
    /// Sent rows move to `messages_sent` in the same statement. Released rows
    /// go back to pending with the claim's attempt given back (the
    /// destination was down, or the relay is shutting down).
    pub(crate) settle: String,
    /// Which of `$1 int8[]` ids are already in `messages_sent` → `id`. Only
    /// after a settle failed on the sent table's key: a row written with an
    /// id the sequence had already given out (by hand, or after `setval`).
    pub(crate) sent_ids_taken: String,
    /// Extend a batch's lease: `$1 int8[] ids, $2 relay id, $3 timestamptz
    /// old locked_at` → the new `locked_at` of each row still held.
    pub(crate) extend_lease: String,
    /// Lease reaper: `$1 float8 lease seconds, $2 int4 max attempts,
    /// $3 float8[] backoff steps in seconds (the last repeats), $4 float8
    /// jitter fraction` → `(id, dead bool, next_run_at, aggregate_key int8)` of each `processing`
    /// row whose claim is older than the lease (or has no lease, or one taken
    /// more than a lease in the future: states migration 10 refuses, still
    /// taken back if written before it). The expiry counts as a failed
    /// attempt: a row that makes its relay die would otherwise come back at
    /// once, forever. Below max attempts the row goes `failed`, due after the
    /// backoff for its attempts; at max attempts it goes `dead`. Both record
    /// which relay's lease expired and when it was taken.
    pub(crate) reap_expired: String,
    /// `LISTEN` on the channel the insert trigger notifies.
    pub(crate) listen: String,
    /// `$1 text` → a notification on that channel with payload `$1`: the
    /// listener's check that LISTEN works (producers' payloads are empty).
    pub(crate) notify_probe: String,
    /// Whether the outbox tables exist, and whether the migrations table
    /// does: → `(has_tables bool, has_migrations bool)`.
    pub(crate) is_migrated: String,
    /// Versions recorded in `schema_migrations` (run only when it exists):
    /// → `version int4` per row.
    pub(crate) recorded_migrations: String,
    /// Counts by status (hot table and sent table): → `(status, count int8)`.
    pub(crate) count_by_status: String,
    /// `age_seconds` (`float8`) of the oldest claimable message, or no row.
    pub(crate) oldest_pending_age: String,

    /// Dead-letter handling.
    pub(crate) dead: DeadQueries,
    /// Archiving.
    pub(crate) archive: ArchiveQueries,
    /// Metrics and `outbox stats`.
    pub(crate) stats: StatsQueries,
    /// The operator page.
    pub(crate) ui: UiQueries,
}

/// The claim statement: `ordered` adds the relay's registration check and
/// returns the aggregate key; `filtered` adds the bucket and held-back
/// filter and bounds what the claim reads (see
/// [`Queries::claim_ordered_filtered`]).
fn claim_sql(ordered: bool, filtered: bool) -> String {
    let (alive, check, key) = if ordered {
        (
            "a AS (SELECT 1 FROM {schema}.relays \
                    WHERE relay_id = $2 AND token = $6 AND lease_until > now() FOR SHARE), ",
            " AND EXISTS (SELECT 1 FROM a)",
            ", {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key",
        )
    } else {
        ("", "", "")
    };
    // The filter can pass over any number of rows (every row of an
    // aggregate in flight, or behind a failed message): the scan is bounded
    // to the first $10 live rows from the floor, whose last id `r` is what
    // the claim read up to.
    //
    // The filter is plain SQL, evaluated in the scan: the row's bucket is
    // owned (`get_bit` as `BucketSet` lays the map out), and its aggregate
    // is not held back past its head. It used to be migration 7's plpgsql
    // `key_allowed` (dropped by migration 11), which hid the filter from
    // the planner so that it kept the claimable index in id order; the
    // bound on `r` does that now (the scan stops at `upto` whatever the
    // filter's estimate), and the bucket test is written `<> 0`, which the
    // planner takes as letting almost every row through. A plpgsql call
    // per row read cost a claim of a quarter of the buckets about 2.5 ms of
    // its 7.5 (`a_filtered_claim_reads_the_claimable_index_in_id_order`
    // pins the plan; docs/performance.md has the figures).
    let (range, filter) = if filtered {
        (
            "r AS (SELECT max(id) AS upto FROM (SELECT id FROM {schema}.messages \
                    WHERE id >= $3 AND dead_at IS NULL ORDER BY id LIMIT $10) x), ",
            " AND id <= (SELECT upto FROM r) \
              AND ($7::bytea IS NULL \
                   OR get_bit($7::bytea, ({schema}.aggregate_key(aggregate_type, aggregate_id) & 1023)::int) <> 0) \
              AND coalesce(id <= ($9::int8[])[array_position($8::int8[], \
                                   {schema}.aggregate_key(aggregate_type, aggregate_id))], true)",
        )
    } else {
        ("", "")
    };
    // An oversized row counts 0 toward the budget: it is not loaded.
    let ctes = format!(
        "c AS ( \
           SELECT id, {ROW_BYTES} AS size FROM {{schema}}.messages \
            WHERE id >= $3 AND status IN ('pending', 'failed') AND next_run_at <= now() \
              AND dead_at IS NULL{check}{filter} \
            ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED), \
         w AS ( \
           SELECT id, size, row_number() OVER (ORDER BY id) AS n, \
                  sum(CASE WHEN size <= $5::int8 THEN size ELSE 0 END) \
                    OVER (ORDER BY id) AS running \
             FROM c), \
         b AS (SELECT id, size FROM w WHERE n = 1 OR running <= $4::int8), \
         s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap)"
    );
    let update = "UPDATE {schema}.messages m \
            SET status = 'processing', attempts = least(m.attempts, 2147483646) + 1, \
                locked_by = $2, locked_at = now() \
           FROM b, s WHERE m.id = b.id";
    let snapshot = "pg_snapshot_xmin(s.snap)::text::int8 AS snapshot_xmin, \
                    pg_snapshot_xmax(s.snap)::text::int8 AS snapshot_xmax";
    if !filtered {
        return format!(
            "WITH {alive}{ctes} {update} \
             RETURNING {CLAIM_COLUMNS}, {snapshot}{key}"
        );
    }
    // One row even when nothing is claimed (the claimed columns NULL), with
    // the snapshot and `scanned_upto`: the claim read every row up to it,
    // so the floor may pass it. Only when the claim took all it could of
    // what it read (neither the limit nor the byte budget cut it short).
    format!(
        "WITH {alive}{range}{ctes}, \
         u AS ({update} RETURNING {CLAIM_COLUMNS}{key}) \
         SELECT u.*, {snapshot}, \
                CASE WHEN (SELECT count(*) FROM c) < $1 \
                      AND (SELECT count(*) FROM b) = (SELECT count(*) FROM c) \
                     THEN (SELECT upto FROM r) END AS scanned_upto \
           FROM s LEFT JOIN u ON true"
    )
}

impl Queries {
    /// Renders every statement for `schema`.
    pub(crate) fn new(schema: &Schema) -> Self {
        let r = |t: &str| render(t, schema);
        Self {
            claim: r(&claim_sql(false, false)),
            claim_ordered: r(&claim_sql(true, false)),
            claim_ordered_filtered: r(&claim_sql(true, true)),
            relay_heartbeat: r("SELECT bucket, gained, renewed, other_modes \
                   FROM {schema}.relay_heartbeat($1, $2, $3, $4)"),
            relay_leave: r("WITH r AS ( \
                   DELETE FROM {schema}.relays WHERE relay_id = $1 AND token = $2 RETURNING 1) \
                 UPDATE {schema}.relay_buckets SET owner = NULL \
                  WHERE owner = $1 AND EXISTS (SELECT 1 FROM r)"),
            held_in_buckets: r("SELECT {schema}.aggregate_key(aggregate_type, aggregate_id) AS aggregate_key, \
                        min(id) AS lowest_id \
                   FROM {schema}.messages \
                  WHERE dead_at IS NULL AND (status = 'processing' OR next_run_at > now()) \
                    AND get_bit($1::bytea, \
                          ({schema}.aggregate_key(aggregate_type, aggregate_id) & 1023)::int) = 1 \
                  GROUP BY 1"),
            next_live: r("SELECT g.k AS aggregate_key, g.id AS from_id, \
                   (SELECT min(m.id) FROM {schema}.messages m \
                     WHERE m.id >= g.id AND m.dead_at IS NULL \
                       AND {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) = g.k) AS lowest_id \
                   FROM unnest($1::int8[], $2::int8[]) AS g(k, id)"),
            settle: r("WITH sent AS ( \
                   DELETE FROM {schema}.messages \
                    WHERE id = ANY($1::int8[]) AND status = 'processing' \
                      AND locked_by = $2 AND locked_at = $3 \
                   RETURNING *), \
                 moved AS ( \
                   INSERT INTO {schema}.messages_sent \
                     (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, \
                      payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, \
                      created_at, sent_at) \
                   SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, \
                          payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, \
                          created_at, now() \
                     FROM sent \
                   RETURNING 1), \
                 failed AS ( \
                   UPDATE {schema}.messages m \
                      SET status = 'failed', locked_by = NULL, locked_at = NULL, \
                          last_error = f.error, next_run_at = f.next_run_at \
                     FROM unnest($4::int8[], $5::text[], $6::timestamptz[]) AS f(id, error, next_run_at) \
                    WHERE m.id = f.id AND m.status = 'processing' \
                      AND m.locked_by = $2 AND m.locked_at = $3 \
                   RETURNING 1), \
                 dead AS ( \
                   UPDATE {schema}.messages m \
                      SET status = 'dead', locked_by = NULL, locked_at = NULL, \
                          last_error = d.reason, dead_reason = d.reason, dead_at = now() \
                     FROM unnest($7::int8[], $8::text[]) AS d(id, reason) \
                    WHERE m.id = d.id AND m.status = 'processing' \
                      AND m.locked_by = $2 AND m.locked_at = $3 \
                   RETURNING 1), \
                 released AS ( \
                   UPDATE {schema}.messages m \
                      SET status = 'pending', attempts = greatest(m.attempts - 1, 0), \
                          locked_by = NULL, locked_at = NULL, last_error = $10 \
                    WHERE m.id = ANY($9::int8[]) AND m.status = 'processing' \
                      AND m.locked_by = $2 AND m.locked_at = $3 \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM moved) AS sent, \
                        (SELECT count(*) FROM failed) AS failed, \
                        (SELECT count(*) FROM dead) AS dead, \
                        (SELECT count(*) FROM released) AS released"),
            sent_ids_taken: r("SELECT id FROM {schema}.messages_sent WHERE id = ANY($1::int8[])"),
            extend_lease: r("UPDATE {schema}.messages SET locked_at = now() \
                  WHERE id = ANY($1::int8[]) AND status = 'processing' \
                    AND locked_by = $2 AND locked_at = $3 \
                 RETURNING locked_at"),
            // SKIP LOCKED: a row locked right now is being settled by its
            // holder, whose lease then still counts; the next pass sees it.
            reap_expired: r("WITH expired AS ( \
                   SELECT id, attempts >= $2 AS dead, \
                          CASE WHEN locked_by IS NULL OR locked_at IS NULL \
                               THEN format('processing without a lease after %s attempt%s', \
                                           attempts, CASE WHEN attempts = 1 THEN '' ELSE 's' END) \
                               ELSE format('lease expired (relay %s claimed it at %s) after %s attempt%s', \
                                 locked_by, \
                                 to_char(locked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
                                 attempts, CASE WHEN attempts = 1 THEN '' ELSE 's' END) END AS reason, \
                          ($3::float8[])[least(greatest(attempts, 1), cardinality($3::float8[]))] \
                            * (1 + $4::float8 * (2 * random() - 1)) AS delay \
                     FROM {schema}.messages \
                    WHERE status = 'processing' \
                      AND (locked_at IS NULL OR locked_by IS NULL \
                           OR locked_at < now() - $1::float8 * interval '1 second' \
                           OR locked_at > now() + $1::float8 * interval '1 second') \
                    FOR UPDATE SKIP LOCKED) \
                 UPDATE {schema}.messages m \
                    SET status = CASE WHEN e.dead THEN 'dead' ELSE 'failed' END, \
                        locked_by = NULL, locked_at = NULL, \
                        last_error = e.reason \
                          || CASE WHEN e.dead THEN '; max attempts reached' ELSE '' END, \
                        dead_reason = CASE WHEN e.dead \
                          THEN e.reason || '; max attempts reached' END, \
                        dead_at = CASE WHEN e.dead THEN now() END, \
                        next_run_at = CASE WHEN e.dead THEN m.next_run_at \
                          ELSE now() + make_interval(secs => e.delay) END \
                   FROM expired e WHERE m.id = e.id \
                 RETURNING m.id, e.dead, CASE WHEN e.dead THEN now() ELSE m.next_run_at END AS next_run_at, \
                   {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key"),
            listen: format!("LISTEN \"{}\"", schema.notify_channel()),
            notify_probe: format!("SELECT pg_notify('{}', $1)", schema.notify_channel()),
            is_migrated: format!(
                "SELECT to_regclass('{s}.messages') IS NOT NULL AS has_tables, \
                        to_regclass('{s}.schema_migrations') IS NOT NULL AS has_migrations",
                s = schema.quoted()
            ),
            recorded_migrations: r("SELECT version FROM {schema}.schema_migrations ORDER BY version"),
            count_by_status: r("SELECT status, count(*) AS count FROM {schema}.messages GROUP BY status \
                 UNION ALL SELECT 'sent', count(*) FROM {schema}.messages_sent"),
            oldest_pending_age: r("SELECT extract(epoch FROM now() - created_at)::float8 AS age_seconds \
                   FROM {schema}.messages \
                  WHERE status IN ('pending', 'failed') AND dead_at IS NULL \
                  ORDER BY id LIMIT 1"),
            dead: DeadQueries::new(schema),
            archive: ArchiveQueries::new(schema),
            stats: StatsQueries::new(schema),
            ui: UiQueries::new(schema),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
