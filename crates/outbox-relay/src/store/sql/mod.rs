//! Every statement the relay engine runs, one `.sql` file each, loaded at
//! compile time and rendered once per schema by `outbox::sql::render`
//! (`{schema}`: the quoted schema name; `{channel}`: its notification
//! channel). Each file's header documents its parameters and result
//! columns, and is left out of the text sent to the server. The functions
//! of [`super`] run the statements and decode the rows by name. The schema
//! and its migrations belong to the `outbox` library.

/// Run once per new connection, as it is: see the file.
pub(crate) const SQL_ASCII_RAW: &str = include_str!("sql_ascii_raw.sql");

outbox::statements! {
    /// The relay's statements for one schema.
    pub(crate) struct Queries {
        claim = include_str!("claim.sql"),
        claim_ordered = include_str!("claim_ordered.sql"),
        claim_ordered_filtered = include_str!("claim_ordered_filtered.sql"),
        relay_heartbeat = include_str!("relay_heartbeat.sql"),
        relay_leave = include_str!("relay_leave.sql"),
        held_in_buckets = include_str!("held_in_buckets.sql"),
        next_live = include_str!("next_live.sql"),
        settle = include_str!("settle.sql"),
        sent_ids_taken = include_str!("sent_ids_taken.sql"),
        extend_lease = include_str!("extend_lease.sql"),
        reap_expired = include_str!("reap_expired.sql"),
        listen = include_str!("listen.sql"),
        notify_probe = include_str!("notify_probe.sql"),
        is_migrated = include_str!("is_migrated.sql"),
        recorded_migrations = include_str!("recorded_migrations.sql"),
    }
    with {
        /// Dead-letter handling (`dead/`).
        dead: DeadQueries,
        /// Archiving (`archive/`).
        archive: ArchiveQueries,
        /// Metrics and `outbox stats` (`stats/`).
        stats: StatsQueries,
        /// The operator page (`ui/`).
        ui: UiQueries,
        /// The hot path's lanes (`lane/`).
        lane: LaneQueries,
    }
}

outbox::statements! {
    /// The hot path (docs/design/insert-only.md): a lane's window, its
    /// batch, and the settle that moves its position.
    pub(crate) struct LaneQueries {
        window = include_str!("lane/window.sql"),
        batch = include_str!("lane/batch.sql"),
        settle = include_str!("lane/settle.sql"),
        pending = include_str!("lane/pending.sql"),
    }
}

outbox::statements! {
    /// Dead-letter statements: list, show, replay, purge.
    pub(crate) struct DeadQueries {
        list = include_str!("dead/list.sql"),
        get = include_str!("dead/get.sql"),
        newest = include_str!("dead/newest.sql"),
        count_matching = include_str!("dead/count_matching.sql"),
        replay = include_str!("dead/replay.sql"),
        unreplayable = include_str!("dead/unreplayable.sql"),
        status_of = include_str!("dead/status_of.sql"),
        purge = include_str!("dead/purge.sql"),
    }
}

outbox::statements! {
    /// The archiver's statements: old sent and dead rows moved (or deleted)
    /// in bounded batches, one short statement per batch.
    pub(crate) struct ArchiveQueries {
        cutoff = include_str!("archive/cutoff.sql"),
        count_sent = include_str!("archive/count_sent.sql"),
        count_dead = include_str!("archive/count_dead.sql"),
        move_sent = include_str!("archive/move_sent.sql"),
        delete_sent = include_str!("archive/delete_sent.sql"),
        move_dead = include_str!("archive/move_dead.sql"),
        delete_dead = include_str!("archive/delete_dead.sql"),
    }
}

outbox::statements! {
    /// Observability: the backlog gauges the relay refreshes on an
    /// interval, and the full breakdown `outbox stats` prints on demand.
    pub(crate) struct StatsQueries {
        backlog = include_str!("stats/backlog.sql"),
        by_topic = include_str!("stats/by_topic.sql"),
        oldest_pending_age = include_str!("stats/oldest_pending_age.sql"),
        oldest_pending_with_dead_at = include_str!("stats/oldest_pending_with_dead_at.sql"),
        ping = include_str!("stats/ping.sql"),
    }
}

outbox::statements! {
    /// The operator page's snapshot (`outbox ui`): computed once per
    /// interval for every viewer, so these run at most once per interval
    /// whatever the number of open pages.
    pub(crate) struct UiQueries {
        hot_counts = include_str!("ui/hot_counts.sql"),
        sent_counters = include_str!("ui/sent_counters.sql"),
        relays = include_str!("ui/relays.sql"),
        recent_replays = include_str!("ui/recent_replays.sql"),
    }
}

impl Queries {
    /// The statements over the draft migration 12's schema: the claim
    /// path's read `retries` (today's table, renamed), the lanes' read the
    /// new `messages`. Transitional: once the migration is registered the
    /// files name `retries` and this goes.
    pub(crate) fn with_retries(schema: &outbox::Schema) -> Self {
        let plain = Self::new(schema);
        let table = format!("{}.messages", schema.quoted());
        let mut q = plain.clone();
        let retries = format!("{}.retries", schema.quoted());
        q.for_each_mut(&mut |text| *text = rename_table(text, &table, &retries));
        q.lane = plain.lane;
        q
    }
}

/// `text` with every `from` that is the whole table name (not followed by
/// a character of an identifier, as in `messages_sent`) replaced by `to`.
fn rename_table(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let whole = !after
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"');
        out.push_str(&rest[..at]);
        out.push_str(if whole { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
