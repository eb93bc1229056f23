//! Running the real `outbox` binary against a test schema.

pub mod net;
pub mod ui;

use outbox_testkit::TestSchema;
use std::process::{Command, Output};

/// `outbox --schema <schema> args…` with `DATABASE_URL` set and every other
/// `OUTBOX_*` variable removed, so the caller's environment cannot leak in.
pub fn outbox(schema: &str, args: &[&str]) -> Command {
    let mut cmd = bare(&["--schema", schema]);
    cmd.args(args);
    cmd
}

/// The binary under test: `OUTBOX_BIN` if set (e.g. the release build, as
/// `scripts/check-ordering.sh` does), else the one Cargo built for the tests.
pub fn binary() -> std::ffi::OsString {
    std::env::var_os("OUTBOX_BIN")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_outbox").into())
}

/// `outbox args…` against the database at `url` (a private server the
/// test started), with no `OUTBOX_*` variable.
pub fn outbox_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = bare(args);
    cmd.env("DATABASE_URL", url);
    cmd
}

/// `outbox args…` with `DATABASE_URL` set and no `OUTBOX_*` variable.
pub fn bare(args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOX_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("DATABASE_URL", outbox_testkit::database_url())
        .env_remove("RUST_LOG")
        .args(args);
    cmd
}

/// The test database's connection string, as `role`.
pub fn url_as(role: &str) -> String {
    let cfg: tokio_postgres::Config = outbox_testkit::database_url().parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    format!(
        "host={host} port={} dbname={} user={role}",
        cfg.get_ports().first().copied().unwrap_or(5432),
        cfg.get_dbname().unwrap_or("postgres")
    )
}

/// Runs `cmd`, returning (exit ok, stdout, stderr).
pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run outbox");
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Runs `outbox` on `t` and expects success; returns stdout.
pub fn ok(t: &TestSchema, args: &[&str]) -> String {
    let (ok, out, err) = run(&mut outbox(t.name(), args));
    assert!(ok, "outbox {args:?} failed:\n{err}\n{out}");
    out
}

/// Runs `outbox` on `t` and expects failure; returns stderr.
pub fn fails(t: &TestSchema, args: &[&str]) -> String {
    let (ok, out, err) = run(&mut outbox(t.name(), args));
    assert!(!ok, "outbox {args:?} succeeded:\n{out}");
    err
}

/// Inserts a dead message on `topic`, dead for `age_hours`; returns its id.
pub async fn dead(t: &TestSchema, topic: &str, age_hours: i32) -> i64 {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           headers, status, attempts, last_error, dead_at, dead_reason) \
         VALUES ('order.created', 'order', '1', $1, '{{\"order_id\": 1}}', '{{\"trace\": \"t1\"}}', \
           'dead', 10, 'broker said no', now() - $2::int * interval '1 hour', \
           'permanent: broker said no') RETURNING id",
        t.schema.quoted()
    );
    client
        .query_one(&sql, &[&topic, &age_hours])
        .await
        .unwrap()
        .get(0)
}

/// Inserts a pending message; returns its id.
pub async fn pending(t: &TestSchema) -> i64 {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('e', 'a', '1', 't', '{{}}') RETURNING id",
        t.schema.quoted()
    );
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// The virtualenv scripts/test.sh prepares (`OUTBOX_TEST_PYTHON`).
pub fn python() -> std::path::PathBuf {
    let path = std::env::var_os("OUTBOX_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/pyenv/bin/python")
        });
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh once to create the read-back virtualenv",
        path.display()
    );
    path
}

/// Runs scripts/bench-publishers.sh small (N rows, one run) on `publisher`
/// with this build's binary, as the README's publisher figures are made;
/// returns its stdout, failing the test if the script fails.
pub fn bench_publishers(publisher: &str, n: u32) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(root.join("scripts/bench-publishers.sh"))
        .arg(publisher)
        .env("N", n.to_string())
        .env("RUNS", "1")
        .env("OUTBOX_BIN", binary())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The rate of the script's `LABEL: N msg/s …` line.
pub fn bench_rate(stdout: &str, label: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{label}: ")))
        .and_then(|r| r.split(' ').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no {label} line: {stdout}"))
}

/// Held for the whole run by the tests that time what relay processes do
/// under a fault (kill -9, a restarted, failed over or partitioned server,
/// a broker outage, a pooler): no two of them share the machine's cores at
/// once, as when each was a test binary of its own, run alone.
pub async fn solo() -> tokio::sync::MutexGuard<'static, ()> {
    static SOLO: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SOLO.lock().await
}
