//! The CLI's own keys, one entry each: the declarations behind
//! [`super::keys`]. Adding a setting is one entry here (and the
//! `RelayConfig` field it applies to); the machinery that reads them is in
//! the parent module.

use super::*;
/// Shortest operator-page token accepted: a guessable one would make the
/// token pointless.
pub const MIN_TOKEN: usize = 16;

/// The CLI's own keys, in the order `outbox config check` prints them.
pub const TABLE: &[Key] = &[
    Key {
        apply: |v, s| {
            s.database_url = Some(parse::database_url(v)?);
            Ok(())
        },
        secret: true,
        global: true,
        help: || "PostgreSQL URL of the outbox database".into(),
        doc: || "`postgres://…`, `postgresql://…` or libpq `key=value` pairs".into(),
        ..key("database_url", "DATABASE_URL", "--database-url")
    },
    Key {
        apply: |v, s| {
            s.schema = Schema::new(v).map_err(|e| e.to_string())?;
            Ok(())
        },
        global: true,
        default: || Some(outbox::DEFAULT_SCHEMA.into()),
        help: || "Schema holding the outbox tables".into(),
        doc: || "lowercase letters, digits, `_`".into(),
        ..key("schema", "OUTBOX_SCHEMA", "--schema")
    },
    Key {
        apply: |v, s| {
            s.publisher = parse::publisher(v)?;
            Ok(())
        },
        secret: true,
        default: || Some(DEFAULT_PUBLISHER.into()),
        // From the publishers' own declarations: what this build serves.
        help: || {
            let urls: Vec<String> = outbox_relay::publishers::declarations()
                .iter()
                .map(|d| {
                    let schemes: Vec<String> =
                        d.schemes.iter().map(|s| format!("`{s}://…`")).collect();
                    format!("{} ({})", schemes.join(", "), d.summary)
                })
                .collect();
            format!(
                "Where to publish: `postgres` (the outbox database's published_events) or a URL: {}",
                urls.join("; ")
            )
        },
        doc: || {
            let prefixes: Vec<String> = outbox_relay::publishers::declarations()
                .iter()
                .flat_map(|d| d.schemes.iter().map(|s| format!("`{s}://`")))
                .collect();
            format!("`postgres` or a publisher URL: {}", prefixes.join(", "))
        },
        ..key("publisher", "OUTBOX_PUBLISHER", "--publisher")
    },
    Key {
        apply: |v, s| {
            s.relay.batch_size = parse::within(v, &BATCH_SIZE_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().batch_size.to_string()),
        help: || format!("Messages claimed per batch, {}", span(&BATCH_SIZE_RANGE)),
        doc: || format!("messages per claim, {}", span(&BATCH_SIZE_RANGE)),
        ..key("batch_size", "OUTBOX_BATCH_SIZE", "--batch-size")
    },
    Key {
        apply: |v, s| {
            s.relay.max_batch_bytes = parse::bytes(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(bytes_text(d().max_batch_bytes)),
        help: || {
            "A claim stops adding messages once they pass this size, payload, headers and text columns counted (it always takes one), e.g. 16MiB".into()
        },
        doc: || {
            "a claim stops adding rows once they reach this, payload, headers and text columns counted (it always takes one), so memory stays bounded whatever producers write; `KiB`/`MiB`/`GiB`".into()
        },
        ..key(
            "max_batch_bytes",
            "OUTBOX_MAX_BATCH_BYTES",
            "--max-batch-bytes",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.max_message_bytes = parse::bytes(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(bytes_text(d().max_message_bytes)),
        help: || {
            "A message (payload, headers and text columns) larger than this is never loaded: it goes dead naming the limit"
                .into()
        },
        doc: || {
            format!("a row larger than this (payload and headers as JSON text, plus topic, event type, aggregate type and id) is never loaded: it goes dead, \"message of N bytes (payload P bytes) exceeds the limit of M bytes\" (twice the library's `{}` payload limit, which counts compact JSON)", bytes_text(outbox::DEFAULT_MAX_PAYLOAD_BYTES))
        },
        ..key(
            "max_message_bytes",
            "OUTBOX_MAX_MESSAGE_BYTES",
            "--max-message-bytes",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.retry.max_attempts = parse::within(v, &MAX_ATTEMPTS_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().retry.max_attempts.to_string()),
        help: || {
            format!(
                "Attempts before a message goes dead, {}",
                span(&MAX_ATTEMPTS_RANGE)
            )
        },
        doc: || {
            format!(
                "attempts before a retryable failure goes dead, {}",
                span(&MAX_ATTEMPTS_RANGE)
            )
        },
        ..key("max_attempts", "OUTBOX_MAX_ATTEMPTS", "--max-attempts")
    },
    Key {
        apply: |v, s| {
            s.relay.retry.schedule = parse::backoff(v)?;
            Ok(())
        },
        default: || {
            let steps: Vec<String> = d().retry.schedule.into_iter().map(duration_text).collect();
            Some(steps.join(","))
        },
        help: || "Retry delays, the last repeats".into(),
        doc: || "delay after attempt 1, 2, …; the last step repeats".into(),
        ..key("backoff", "OUTBOX_BACKOFF", "--backoff")
    },
    Key {
        apply: |v, s| {
            s.relay.retry.jitter = parse::fraction(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().retry.jitter.to_string()),
        help: || "Fraction of each retry delay randomised, [0, 1)".into(),
        doc: || "± fraction of each delay randomised, in [0, 1)".into(),
        ..key("jitter", "OUTBOX_JITTER", "--jitter")
    },
    Key {
        apply: |v, s| {
            s.relay.lease = parse::duration_at_least(MIN_LEASE, MIN_LEASE_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().lease)),
        help: || {
            "A claim older than this is presumed dead: its rows count a failed attempt and are retried after the backoff, or go dead at max attempts".into()
        },
        doc: || {
            format!("a claim older than this is presumed dead and recovered as a failed attempt (backoff, then dead at `max_attempts`, naming the expired lease); renewed every half lease while a batch publishes; at least `{}`", duration_text(MIN_LEASE))
        },
        ..key("lease", "OUTBOX_LEASE", "--lease")
    },
    Key {
        apply: |v, s| {
            s.relay.publish_timeout =
                parse::duration_at_least(MIN_PUBLISH_TIMEOUT, MIN_PUBLISH_TIMEOUT_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().publish_timeout)),
        help: || {
            "How long one batch may take to publish before all of it fails retryably, spending an attempt".into()
        },
        doc: || {
            format!("a batch still publishing after this fails retryably (\"publish timed out after …\"), spending an attempt; at least `{}`", duration_text(MIN_PUBLISH_TIMEOUT))
        },
        ..key(
            "publish_timeout",
            "OUTBOX_PUBLISH_TIMEOUT",
            "--publish-timeout",
        )
    },
    Key {
        apply: |v, s| {
            s.relay.db_timeout = parse::duration_at_least(MIN_DB_TIMEOUT, MIN_DB_TIMEOUT_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().db_timeout)),
        help: || {
            "Longest one database call may take; then the connection is dropped and the call retried on a new one (a network partition cannot hold the relay)".into()
        },
        doc: || {
            format!("a database call (taking a connection, then one statement) that has not answered after this fails, its connection dropped; the relay retries on a new connection within a second; at least `{}`", duration_text(MIN_DB_TIMEOUT))
        },
        ..key("db_timeout", "OUTBOX_DB_TIMEOUT", "--db-timeout")
    },
    Key {
        apply: |v, s| {
            s.relay.ordering = v.parse()?;
            Ok(())
        },
        default: || Some(d().ordering.as_str().into()),
        help: || {
            format!("`{}`: messages of one aggregate (aggregate_type, aggregate_id) are published in id order, k+1 only after k is sent or dead, other aggregates in parallel; `{}`: no order, for the last bit of throughput. Every relay of a schema must use the same", Ordering::Aggregate.as_str(), Ordering::None.as_str())
        },
        doc: || {
            "`aggregate`: the messages of one aggregate (`aggregate_type`, `aggregate_id`) are published in id order, k+1 only after k is sent or dead, through retries, several pipelines and several relays; other aggregates go in parallel. `none`: no order, for the last bit of throughput. Every relay of a schema must use the same (a relay warns when it sees the other mode)".into()
        },
        ..key("ordering", "OUTBOX_ORDERING", "--ordering")
    },
    Key {
        apply: |v, s| {
            s.relay.bucket_lease =
                parse::duration_at_least(MIN_BUCKET_LEASE, MIN_BUCKET_LEASE_WHY)(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().bucket_lease)),
        help: || {
            "With ordering on, how long a relay leases its share of the aggregates: a relay that dies hands them to the others after this long".into()
        },
        doc: || {
            format!("with ordering on, each relay leases a fair share of the aggregates (1,024 buckets) for this long, renewed every third of it; a relay that stops cleanly (`SIGTERM`, `relay --once`) frees its share at once, a crashed one only when its lease ends; at least `{}`", duration_text(MIN_BUCKET_LEASE))
        },
        ..key("bucket_lease", "OUTBOX_BUCKET_LEASE", "--bucket-lease")
    },
    Key {
        apply: |v, s| {
            s.relay_id = Some(parse::relay_id(v)?);
            Ok(())
        },
        unset: Some("host-pid-random"),
        help: || "Identifies this relay in `locked_by`".into(),
        doc: || "written to `locked_by`; with ordering on, each running relay needs its own".into(),
        ..key("relay_id", "OUTBOX_RELAY_ID", "--relay-id")
    },
    Key {
        apply: |v, s| {
            s.relay.notify = parse::switch(v)?;
            Ok(())
        },
        default: || Some(switch(d().notify)),
        help: || {
            "Wake up on the producers' NOTIFY: on|off (off for transaction-mode PgBouncer)".into()
        },
        doc: || "LISTEN/NOTIFY wake-ups; `off` behind transaction-mode PgBouncer".into(),
        ..key("notify", "OUTBOX_NOTIFY", "--notify")
    },
    Key {
        apply: |v, s| {
            s.relay.idle_sleep = parse::positive_duration(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().idle_sleep)),
        help: || "Sleep when there is nothing to do".into(),
        doc: || "sleep when there is nothing to do".into(),
        ..key("poll_interval", "OUTBOX_POLL_INTERVAL", "--poll-interval")
    },
    Key {
        apply: |v, s| {
            s.relay.reap_interval = parse::positive_duration(v)?;
            Ok(())
        },
        default: || Some(duration_text(d().reap_interval)),
        help: || "How often expired leases are looked for".into(),
        doc: || "how often expired leases are looked for".into(),
        ..key("reap_interval", "OUTBOX_REAP_INTERVAL", "--reap-interval")
    },
    Key {
        apply: |v, s| {
            s.relay.concurrency = parse::within(v, &CONCURRENCY_RANGE)?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().concurrency.to_string()),
        help: || {
            format!("Claim/publish pipelines in parallel, {}; with ordering on, each aggregate's messages still go out in order", span(&CONCURRENCY_RANGE))
        },
        doc: || {
            format!("claim/publish pipelines in parallel, {}; batches publish side by side, and with `ordering = \"aggregate\"` (the default) each aggregate's messages still go out in order (with `none`, order across batches is not kept)", span(&CONCURRENCY_RANGE))
        },
        ..key("concurrency", "OUTBOX_CONCURRENCY", "--concurrency")
    },
    Key {
        apply: |v, s| {
            s.relay.rate_limit = parse::optional(v, |n| parse::number(n, 1, u32::MAX))?;
            Ok(())
        },
        numeric: true,
        default: || Some(d().rate_limit.map_or("off".into(), |n| n.to_string())),
        help: || "At most this many messages per second, or `off`".into(),
        doc: || "at most this many messages per second".into(),
        ..key("rate_limit", "OUTBOX_RATE_LIMIT", "--rate-limit")
    },
    Key {
        apply: |v, s| {
            s.relay.archive_after = parse::optional(v, parse::positive_duration)?;
            Ok(())
        },
        default: || Some(d().archive_after.map_or("off".into(), duration_text)),
        help: || "Archive sent rows older than this while running, or `off`".into(),
        doc: || "the relay archives sent rows older than this".into(),
        ..key("archive_after", "OUTBOX_ARCHIVE_AFTER", "--archive-after")
    },
    Key {
        apply: |v, s| {
            s.metrics_addr = parse::optional(v, parse::socket_addr)?;
            Ok(())
        },
        unset: Some("off"),
        help: || {
            "Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9090 (0.0.0.0:9090 to listen beyond this host)".into()
        },
        doc: || {
            "`ip:port` serving `/metrics`, `/healthz`, `/readyz` (see [observability](observability.md)) and the [operator page](#operator-page) at `/`".into()
        },
        ..key("metrics_addr", "OUTBOX_METRICS_ADDR", "--metrics-addr")
    },
    Key {
        apply: |v, s| {
            s.metrics_topics = parse::topic_labels(v)?;
            Ok(())
        },
        numeric: true,
        default: || Some(outbox_relay::metrics::DEFAULT_TOPIC_CAP.to_string()),
        help: || {
            "Distinct topics that keep their own `topic` label on outbox_published_total (later ones count as `_other`), or `off` to drop the label".into()
        },
        doc: || {
            "distinct topics labelled on `outbox_published_total`; `off` drops the label".into()
        },
        ..key(
            "metrics_topics",
            "OUTBOX_METRICS_TOPICS",
            "--metrics-topics",
        )
    },
    Key {
        apply: |v, s| {
            s.ui_allowed_hosts = parse::host_names(v)?;
            Ok(())
        },
        unset: Some("none"),
        help: || {
            "Host names the operator page answers besides IP addresses and localhost, comma-separated, e.g. outbox.internal (any other Host header is refused: DNS rebinding)".into()
        },
        doc: || {
            "comma-separated names the [operator page](#operator-page) answers in `Host`, besides IP addresses and `localhost`".into()
        },
        ..key(
            "ui_allowed_hosts",
            "OUTBOX_UI_ALLOWED_HOSTS",
            "--ui-allowed-hosts",
        )
    },
    Key {
        apply: |v, s| {
            s.ui_token = Some(parse::ui_token(v, MIN_TOKEN)?);
            Ok(())
        },
        hidden: true,
        unset: Some("none"),
        help: || "Token the operator page's actions (replay, purge) need".into(),
        doc: || {
            format!("token the [operator page](#operator-page)'s actions (replay, purge) need, and beyond loopback reading too (unset: read-only); at least {MIN_TOKEN} characters, e.g. `openssl rand -hex 24`; no flag, as command lines show in `ps`")
        },
        ..key("ui_token", "OUTBOX_UI_TOKEN", "")
    },
    Key {
        apply: |v, s| {
            s.log_format = parse::log_format(v)?;
            Ok(())
        },
        global: true,
        default: || Some(crate::logging::LogFormat::default().as_str().into()),
        help: || {
            "Log lines as `text` (for people) or `json` (one object per line, for log shippers); levels come from RUST_LOG".into()
        },
        doc: || "`text` for people, `json` for log shippers".into(),
        ..key("log_format", "OUTBOX_LOG_FORMAT", "--log-format")
    },
];
