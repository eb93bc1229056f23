//! The `outbox` binary as a user runs it: the seed's exact lines, clear
//! errors, nothing written on bad input.

use crate::common;

use outbox_testkit::{database_url, TestSchema};
use std::process::{Command, Output};

fn outbox(schema: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", database_url())
        .env_remove("OUTBOX_SCHEMA")
        .arg("--schema")
        .arg(schema)
        .args(args)
        .output()
        .expect("run outbox")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn failure(o: &Output) -> String {
    assert!(!o.status.success(), "expected failure, got {:?}", o.status);
    let err = String::from_utf8(o.stderr.clone()).unwrap();
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one clear sentence: {err}"
    );
    err
}

#[tokio::test]
async fn the_seed_demo_lines_on_a_fresh_schema() {
    let t = TestSchema::unmigrated("cli_demo").await;
    let s = t.name();
    for i in 1..=3 {
        assert_eq!(
            stdout(&outbox(s, &["demo", "create-order"])),
            format!("order_id={i} outbox_message_id={i}\n")
        );
    }
    assert_eq!(
        stdout(&outbox(s, &["demo", "relay"])),
        "claimed=3 published=3 marked_sent=3 failed=0\norders=3 outbox_messages=3 published_events=3\n"
    );
    assert_eq!(
        stdout(&outbox(s, &["demo", "crash-window"])),
        "message_id=4\n\
         first_relay claimed=1 published=1 marked_sent=0 simulated_crash=true\n\
         published_after_crash=1 recovered_processing=1\n\
         second_relay claimed=1 published=1 marked_sent=1\n\
         published_after_retry=2\n"
    );
    assert_eq!(
        stdout(&outbox(s, &["demo", "consume"])),
        "processed=4 duplicates_skipped=1\n"
    );
    // A consumer that sees everything again skips everything.
    assert_eq!(
        stdout(&outbox(s, &["demo", "consume"])),
        "processed=0 duplicates_skipped=5\n"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.demo_orders WHERE status = 'confirmed'")
            .await,
        4
    );
    // The tour refuses a schema that already holds data rather than mix it up.
    let err = failure(&outbox(s, &["demo", "tour"]));
    assert!(err.contains("fresh schema"), "{err}");
}

#[test]
fn crash_window_on_a_fresh_database_prints_the_seed_lines() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(TestSchema::unmigrated("cli_crash"));
    assert_eq!(
        stdout(&outbox(t.name(), &["demo", "crash-window"])),
        "message_id=1\n\
         first_relay claimed=1 published=1 marked_sent=0 simulated_crash=true\n\
         published_after_crash=1 recovered_processing=1\n\
         second_relay claimed=1 published=1 marked_sent=1\n\
         published_after_retry=2\n"
    );
    assert_eq!(
        stdout(&outbox(t.name(), &["demo", "consume"])),
        "processed=1 duplicates_skipped=1\n"
    );
    drop(t);
}

#[test]
fn tour_without_database_url_runs_on_a_throwaway_postgres() {
    let o = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env_remove("DATABASE_URL")
        .env_remove("OUTBOX_SCHEMA")
        .args(["demo", "tour"])
        .output()
        .unwrap();
    // Exactly what the README shows.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let shown = readme
        .split("Its output:\n\n```\n")
        .nth(1)
        .and_then(|r| r.split("```").next())
        .expect("the README shows the tour's output");
    assert_eq!(stdout(&o), shown);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.lines().count(),
        1,
        "one line on stderr, the throwaway's:\n{err}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let dir = err
        .split("data in ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("says where the throwaway PostgreSQL lives");
    assert!(!std::path::Path::new(dir).exists(), "{dir} removed on exit");
}

/// README "Install": `outbox --version` prints what the README shows.
#[test]
fn version_is_what_the_readme_shows() {
    let o = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("--version")
        .output()
        .unwrap();
    let printed = stdout(&o);
    assert_eq!(printed, format!("outbox {}\n", env!("CARGO_PKG_VERSION")));
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let shown = readme
        .lines()
        .find(|l| l.starts_with("outbox --version"))
        .and_then(|l| l.split("# ").nth(1))
        .expect("the README shows `outbox --version` and what it prints");
    assert_eq!(shown.trim(), printed.trim());
}

#[tokio::test]
async fn relay_once_publishes_a_plain_sql_insert_and_never_a_rolled_back_one() {
    let t = TestSchema::unmigrated("cli_relay_once").await;
    stdout(&outbox(t.name(), &["migrate"]));
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('order.created', 'order', '1', 'order.created', '{\"order_id\": 1}')",
    )
    .await;
    // Its own batch: a BEGIN inside a multi-statement string would take the
    // insert above into the rolled-back transaction too.
    t.exec(
        "BEGIN; INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('order.created', 'order', '2', 'never', '{}'); ROLLBACK;",
    )
    .await;
    assert_eq!(
        stdout(&outbox(t.name(), &["relay", "--once"])),
        "claimed=1 published=1 marked_sent=1 failed=0\n"
    );
    assert_eq!(
        stdout(&outbox(t.name(), &["relay", "--once"])),
        "claimed=0 published=0 marked_sent=0 failed=0\n"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events WHERE topic = 'never'")
            .await,
        0
    );

    let stats: serde_json::Value =
        serde_json::from_str(&stdout(&outbox(t.name(), &["stats", "--json"]))).unwrap();
    assert_eq!(stats["counts"]["sent"], 1);
    assert_eq!(stats["counts"]["pending"], 0);
    assert_eq!(stats["dead"], 0);
}

#[tokio::test]
async fn migrate_twice_is_a_no_op() {
    let t = TestSchema::unmigrated("cli_migrate").await;
    stdout(&outbox(t.name(), &["migrate"]));
    stdout(&outbox(t.name(), &["migrate"]));
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.schema_migrations")
            .await,
        outbox::sql::MIGRATIONS.len() as i64
    );
}

#[test]
fn bad_schema_name_is_refused_and_nothing_is_created() {
    for bad in ["Bad-Name", "x;drop", "pg_toast", ""] {
        let err = failure(&outbox(bad, &["migrate"]));
        assert!(err.contains("invalid schema name"), "{bad}: {err}");
    }
}

#[test]
fn no_database_url_is_one_clear_error_naming_it() {
    let o = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env_remove("DATABASE_URL")
        .args(["relay", "--once"])
        .output()
        .unwrap();
    assert!(failure(&o).contains("DATABASE_URL"));
}

#[tokio::test]
async fn bad_flags_fail_cleanly() {
    let t = TestSchema::new("cli_bad_flags").await;
    let err = failure(&outbox(
        t.name(),
        &["relay", "--once", "--publisher", "carrier-pigeon://x"],
    ));
    assert!(err.contains("unknown publisher"), "{err}");
    let err = failure(&outbox(t.name(), &["relay", "--once", "--batch-size", "0"]));
    assert!(err.contains("batch_size"), "{err}");
    let o = outbox(t.name(), &["relay", "--once", "--lease", "soon"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--lease"));
    // Accepted once, and 27 % of messages went out twice.
    let err = failure(&outbox(t.name(), &["relay", "--once", "--lease", "1ms"]));
    assert!(
        err.contains("lease") && err.contains("at least 1s"),
        "{err}"
    );
    let err = failure(&outbox("t_never_migrated_schema", &["relay", "--once"]));
    assert!(err.contains("outbox migrate"), "{err}");
}

#[test]
fn passwords_in_urls_are_never_printed() {
    let o = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", "postgres://app:hunter2@127.0.0.1:1/db")
        .args(["stats"])
        .output()
        .unwrap();
    let err = failure(&o);
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("app:***@"), "{err}");
}

/// A refused connection is one line: what the command could not do, then
/// the cause from the operating system, said once.
#[test]
fn a_refused_connection_says_its_cause_once() {
    let o = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("DATABASE_URL", "postgres://app@127.0.0.1:1/db")
        .args(["stats"])
        .output()
        .unwrap();
    let err = failure(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot connect to postgres://app@127.0.0.1:1/db: "),
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
}

/// A reader that goes away (`outbox config check | head -1`) ends the
/// command quietly, as SIGPIPE would: no panic, status 141.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let mut child = common::bare(&["config", "check"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
}

/// SIGINT in a command that started a throwaway PostgreSQL stops the
/// server and removes its directory before exiting with 130.
#[test]
fn an_interrupted_bench_removes_its_throwaway_postgres() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut cmd = common::bare(&["bench", "soak", "--runs", "1"]);
    cmd.env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let dir = first
        .split("data in ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no data directory in: {first}"))
        .to_owned();
    assert!(std::path::Path::new(&dir).exists(), "{dir}");
    std::thread::sleep(std::time::Duration::from_secs(2));
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(130), "{rest:?}");
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
}

/// `migrate --dry-run` names what `migrate` would apply and writes nothing.
#[tokio::test]
async fn migrate_dry_run_names_the_migrations_and_writes_nothing() {
    let t = TestSchema::unmigrated("cli_migrate_dry").await;
    let out = stdout(&outbox(t.name(), &["migrate", "--dry-run"]));
    assert!(
        out.starts_with(&format!("schema {}: would apply 0001_init,", t.name())),
        "{out}"
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM pg_namespace WHERE nspname = '{}'",
            t.name()
        ))
        .await,
        0,
        "nothing written"
    );
    // README "Run the relay": `--print` shows the SQL, and writes nothing either.
    let sql = stdout(&outbox(t.name(), &["migrate", "--print"]));
    assert!(
        sql.starts_with("BEGIN;\n") && sql.ends_with("COMMIT;\n"),
        "{sql}"
    );
    assert!(
        sql.contains("CREATE TABLE") && sql.contains(t.name()),
        "{sql}"
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM pg_namespace WHERE nspname = '{}'",
            t.name()
        ))
        .await,
        0,
        "--print wrote nothing"
    );
    stdout(&outbox(t.name(), &["migrate"]));
    let out = stdout(&outbox(t.name(), &["migrate", "--dry-run"]));
    assert!(out.contains("up to date"), "{out}");
}
