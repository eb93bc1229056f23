//! The table is an API, as a property: rows with generated values
//! (extreme, empty, huge, in combinations the relay never writes), written
//! through the producer role and by a superuser among healthy messages,
//! then the real relay. Whatever was written, the relay process stays up,
//! every healthy message is sent, every other row the schema took ends
//! `sent` or `dead` (with a reason, unless it was written dead), and
//! `dead list`, `stats` and the page answer.
//!
//! The superuser's rows are written as before migration 10 (its CHECK and
//! migration 6's dropped, their records removed) and `outbox migrate` then
//! runs as an upgrade would: what the schema refuses today must still be
//! handled when it was written yesterday. The producer's rows are written
//! under today's schema, which may refuse them.

use crate::common;

use common::net::{free_port, get, Running};
use common::{outbox, run, url_as};
use outbox_testkit::{database_url, TestSchema};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::process::Stdio;

/// Healthy messages beside the generated ones, in each case.
const HEALTHY: i64 = 10;

#[derive(Clone)]
struct Hostile {
    event_type: String,
    aggregate_type: String,
    aggregate_id: String,
    topic: String,
    payload: String,
    headers: String,
    event_version: i32,
    /// `None`: written by the producer role (the columns an enqueue
    /// writes); `Some`: by a superuser, every column.
    state: Option<State>,
}

#[derive(Clone)]
struct State {
    status: &'static str,
    locked_by: Option<&'static str>,
    locked_at: Option<&'static str>,
    dead_at: Option<&'static str>,
    dead_reason: Option<String>,
    attempts: i32,
    next_run_at: &'static str,
    created_at: &'static str,
    /// A `messages_sent` row takes the same id.
    sent_clash: bool,
}

/// A value as a failure report shows it: long ones by their size.
fn shown(v: &str) -> String {
    if v.len() <= 60 {
        format!("{v:?}")
    } else {
        format!(
            "{:?}… ({} bytes)",
            v.chars().take(20).collect::<String>(),
            v.len()
        )
    }
}

impl std::fmt::Debug for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hostile")
            .field("event_type", &format_args!("{}", shown(&self.event_type)))
            .field(
                "aggregate_type",
                &format_args!("{}", shown(&self.aggregate_type)),
            )
            .field(
                "aggregate_id",
                &format_args!("{}", shown(&self.aggregate_id)),
            )
            .field("topic", &format_args!("{}", shown(&self.topic)))
            .field("payload", &format_args!("{}", shown(&self.payload)))
            .field("headers", &format_args!("{}", shown(&self.headers)))
            .field("event_version", &self.event_version)
            .field("state", &self.state)
            .finish()
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("status", &self.status)
            .field("locked_by", &self.locked_by)
            .field("locked_at", &self.locked_at)
            .field("dead_at", &self.dead_at)
            .field("dead_reason", &self.dead_reason.as_deref().map(shown))
            .field("attempts", &self.attempts)
            .field("next_run_at", &self.next_run_at)
            .field("created_at", &self.created_at)
            .field("sent_clash", &self.sent_clash)
            .finish()
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[^\u{0}]{0,24}",
        1 => Just(String::new()),
        1 => Just("naïve ✓ \u{202e}rtl \u{1F600}".to_owned()),
        1 => Just("a\tb\r\nc\u{1b}[31m\u{7f}".to_owned()),
        1 => Just("x".repeat(70_000)),
        // Over the max message size (2 MiB) on its own.
        1 => Just("y".repeat(3_000_000)),
    ]
}

fn payload() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just("{}".to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("\"\"".to_owned()),
        1 => Just("1e400".to_owned()),
        1 => Just("[-1e-400, 123456789012345678901234567890, -0.0]".to_owned()),
        1 => (129usize..3000).prop_map(|d| format!("{}0{}", "[".repeat(d), "]".repeat(d))),
        1 => (129usize..1500).prop_map(|d| format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d))),
        1 => Just(format!("{{\"big\": \"{}\"}}", "z".repeat(1_500_000))),
        1 => Just(format!("{{\"big\": \"{}\"}}", "z".repeat(3_000_000))),
        // Refused by jsonb itself: the insert fails, nothing to handle.
        1 => Just("\"\\u0000\"".to_owned()),
        1 => Just("{\"s\": \"\\ud83d\\ude00 \\u00e9\"}".to_owned()),
    ]
}

fn headers() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => Just("{}".to_owned()),
        2 => Just("{\"traceparent\": \"00-abc-def-01\"}".to_owned()),
        1 => Just("[]".to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("{\"n\": 1e400}".to_owned()),
        1 => Just("{\"source\": \"crm\"}".to_owned()),
        1 => Just(format!("{{\"h\": \"{}\"}}", "h".repeat(3_000_000))),
        1 => (129usize..1000).prop_map(|d| format!("{{\"h\": {}0{}}}", "[".repeat(d), "]".repeat(d))),
    ]
}

fn time() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "now",
        "-infinity",
        "infinity",
        "2000-01-01 00:00:00+00",
        "4713-01-01 00:00:00+00 BC",
        "200000-01-01 00:00:00+00",
        "270000-01-01 00:00:00+00",
    ])
}

fn state() -> impl Strategy<Value = State> {
    (
        prop::sample::select(vec!["pending", "processing", "failed", "dead", "sent"]),
        prop::option::of(prop::sample::select(vec!["r-other", ""])),
        prop::option::of(prop::sample::select(vec![
            "now",
            "infinity",
            "-infinity",
            "2000-01-01 00:00:00+00",
            "2100-01-01 00:00:00+00",
        ])),
        prop::option::of(prop::sample::select(vec!["now", "infinity"])),
        prop::option::of(text()),
        prop_oneof![
            Just(i32::MIN),
            Just(-1),
            Just(i32::MAX),
            Just(i32::MAX - 1),
            0..5
        ],
        // Never a finite time in the future: that is a schedule, honoured.
        prop::sample::select(vec![
            "now",
            "-infinity",
            "infinity",
            "2000-01-01 00:00:00+00",
        ]),
        time(),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(
                status,
                locked_by,
                locked_at,
                dead_at,
                dead_reason,
                attempts,
                next_run_at,
                created_at,
                sent_clash,
            )| State {
                status,
                locked_by,
                locked_at,
                dead_at,
                dead_reason,
                attempts,
                next_run_at,
                created_at,
                sent_clash,
            },
        )
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        (text(), text(), text(), text()),
        payload(),
        headers(),
        any::<i32>(),
        prop::option::weighted(0.6, state()),
    )
        .prop_map(
            |((event_type, aggregate_type, aggregate_id, topic), payload, headers, v, state)| {
                Hostile {
                    event_type,
                    aggregate_type,
                    aggregate_id,
                    topic,
                    payload,
                    headers,
                    event_version: v,
                    state,
                }
            },
        )
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Writes the rows; returns how many the schema took.
async fn write(t: &TestSchema, producer: &str, rows: &[Hostile]) -> usize {
    let s = t.schema.quoted();
    let admin = connect(&database_url()).await;
    // As a schema from before migrations 6 and 10 holds them.
    admin
        .batch_execute(&format!(
            "ALTER TABLE {s}.messages DROP CONSTRAINT messages_state_valid; \
             ALTER TABLE {s}.messages DROP CONSTRAINT messages_headers_valid; \
             DELETE FROM {s}.schema_migrations WHERE version IN (6, 10);"
        ))
        .await
        .unwrap();
    let mut taken = 0;
    for h in rows {
        let Some(st) = &h.state else { continue };
        let sql = format!(
            "INSERT INTO {s}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
               headers, event_version, status, locked_by, locked_at, dead_at, dead_reason, attempts, \
               next_run_at, created_at) \
             VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb, $7, $8, $9, \
                     $10::text::timestamptz, $11::text::timestamptz, $12, $13, \
                     $14::text::timestamptz, $15::text::timestamptz) RETURNING id"
        );
        let inserted = admin
            .query_opt(
                &sql,
                &[
                    &h.event_type,
                    &h.aggregate_type,
                    &h.aggregate_id,
                    &h.topic,
                    &h.payload,
                    &h.headers,
                    &h.event_version,
                    &st.status,
                    &st.locked_by,
                    &st.locked_at,
                    &st.dead_at,
                    &st.dead_reason,
                    &st.attempts,
                    &st.next_run_at,
                    &st.created_at,
                ],
            )
            .await;
        let Ok(Some(row)) = inserted else { continue };
        taken += 1;
        if st.sent_clash {
            let id: i64 = row.get(0);
            admin
                .execute(
                    &format!(
                        "INSERT INTO {s}.messages_sent (id, event_id, event_type, event_version, \
                           aggregate_type, aggregate_id, topic, payload, headers, attempts, \
                           next_run_at, created_at, sent_at) \
                         VALUES ($1, gen_random_uuid(), 'older', 1, 'a', 'older', 't', '{{}}', \
                                 '{{}}', 1, now(), now(), now())"
                    ),
                    &[&id],
                )
                .await
                .unwrap();
        }
    }
    // The upgrade: migrations 6 and 10 applied again, as to an old schema.
    let (ok, out, err) = run(&mut outbox(t.name(), &["migrate"]));
    assert!(ok, "migrate: {err}{out}");

    // Today's producer, under today's schema; then the healthy messages.
    let producer = connect(&url_as(producer)).await;
    let insert = format!(
        "INSERT INTO {s}.messages (event_type, aggregate_type, aggregate_id, topic, payload, headers, \
           event_version) VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb, $7)"
    );
    for h in rows.iter().filter(|h| h.state.is_none()) {
        let written = producer
            .execute(
                &insert,
                &[
                    &h.event_type,
                    &h.aggregate_type,
                    &h.aggregate_id,
                    &h.topic,
                    &h.payload,
                    &h.headers,
                    &h.event_version,
                ],
            )
            .await;
        taken += usize::from(written.is_ok());
    }
    for i in 0..HEALTHY {
        producer
            .execute(
                &insert,
                &[
                    &"healthy",
                    &"order",
                    &format!("healthy-{i}"),
                    &"orders",
                    &format!("{{\"i\": {i}}}"),
                    &"{}",
                    &1_i32,
                ],
            )
            .await
            .unwrap();
    }
    taken
}

async fn case(roles: &(String, String), rows: Vec<Hostile>) -> Result<(), TestCaseError> {
    let (producer, relay_role) = roles;
    let t = TestSchema::new("row_space").await;
    let (ok, _, err) = run(&mut outbox(
        t.name(),
        &[
            "grants",
            "--producer",
            producer,
            "--relay",
            relay_role,
            "--apply",
        ],
    ));
    prop_assert!(ok, "grants: {}", err);
    let written = write(&t, producer, &rows).await;

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = tempfile::NamedTempFile::new().unwrap();
    let relay = Running(
        outbox(
            t.name(),
            &[
                "relay",
                "--lease",
                "2s",
                "--backoff",
                "100ms",
                "--jitter",
                "0",
                "--reap-interval",
                "200ms",
                "--max-attempts",
                "3",
                "--metrics-addr",
                &addr,
            ],
        )
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap(),
    );
    let mut relay = relay;
    let admin = connect(&database_url()).await;
    let s = t.schema.quoted();
    let unsettled = format!(
        "SELECT count(*) FROM {s}.messages WHERE status IN ('pending', 'processing', 'failed')"
    );
    let mut settled = false;
    for _ in 0..600 {
        if relay.0.try_wait().unwrap().is_some() {
            break;
        }
        let n: i64 = admin.query_one(&unsettled, &[]).await.unwrap().get(0);
        if n == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let stderr = || std::fs::read_to_string(log.path()).unwrap_or_default();
    prop_assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay exited: {}",
        stderr()
    );
    prop_assert!(
        settled,
        "rows still unsettled after 60 s ({} written): {}",
        written,
        stderr()
    );
    prop_assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));

    // Every healthy message sent; every row sent or dead, with a reason
    // unless written dead.
    let sent_healthy: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {s}.messages_sent WHERE event_type = 'healthy'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    prop_assert_eq!(sent_healthy, HEALTHY);
    let dead = admin
        .query(
            &format!(
                "SELECT id, dead_reason IS NOT NULL FROM {s}.messages \
                  WHERE status = 'dead' AND dead_at IS NOT NULL ORDER BY id"
            ),
            &[],
        )
        .await
        .unwrap();
    let hot: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {s}.messages"), &[])
        .await
        .unwrap()
        .get(0);
    prop_assert_eq!(hot, dead.len() as i64, "rows neither sent nor dead");
    let written_dead = rows
        .iter()
        .filter_map(|h| h.state.as_ref())
        .filter(|st| st.status == "dead" && st.dead_at.is_some())
        .count();
    let without_reason = dead.iter().filter(|r| !r.get::<_, bool>(1)).count();
    prop_assert!(
        without_reason <= written_dead,
        "{} dead rows without a reason",
        without_reason
    );

    eprintln!(
        "row_space case: {} generated, {} taken by the schema, {} dead",
        rows.len(),
        written,
        dead.len()
    );
    // The operator's views answer.
    let (ok, out, err) = run(&mut outbox(
        t.name(),
        &["dead", "list", "--json", "--limit", "1000"],
    ));
    prop_assert!(ok, "dead list: {}", err);
    // Raw: a payload may hold numbers no 64-bit float can.
    let listed = serde_json::from_str::<Vec<Box<serde_json::value::RawValue>>>(&out);
    prop_assert!(listed.is_ok(), "dead list --json: {:?}", listed.err());
    prop_assert_eq!(listed.map(|l| l.len()).ok(), Some(dead.len()));
    let (ok, out, err) = run(&mut outbox(t.name(), &["stats", "--json"]));
    prop_assert!(ok, "stats: {}", err);
    prop_assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
    let page = get(port, "/");
    prop_assert_eq!(page.as_ref().map(|p| p.0), Some(200));
    for r in dead.iter().take(5) {
        let id: i64 = r.get(0);
        let detail = get(port, &format!("/dead/{id}"));
        prop_assert_eq!(detail.map(|d| d.0), Some(200), "/dead/{}", id);
    }
    prop_assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
    prop_assert!(relay.0.try_wait().unwrap().is_none());
    Ok(())
}

#[test]
fn every_row_the_schema_takes_is_sent_or_dead_and_every_view_answers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let suffix = format!("{:08x}", rand::random::<u32>());
    let roles = (
        format!("t_rs_producer_{suffix}"),
        format!("t_rs_relay_{suffix}"),
    );
    let (producer, relay) = (&roles.0, &roles.1);
    rt.block_on(async {
        connect(&database_url())
            .await
            .batch_execute(&format!(
                "CREATE ROLE {producer} LOGIN; CREATE ROLE {relay} LOGIN"
            ))
            .await
            .unwrap();
    });
    let mut runner = TestRunner::new(Config {
        cases: 10,
        max_shrink_iters: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(hostile(), 1..10), |rows| {
        rt.block_on(case(&roles, rows))
    });
    rt.block_on(async {
        let _ = connect(&database_url())
            .await
            .batch_execute(&format!(
                "DROP OWNED BY {producer}, {relay}; DROP ROLE {producer}; DROP ROLE {relay}"
            ))
            .await;
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
