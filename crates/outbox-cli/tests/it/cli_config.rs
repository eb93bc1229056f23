//! Configuration on the real binary: file < env < flags, one clear error
//! per problem, nothing written on a bad configuration, no password shown.

use crate::common;

use common::{bare, outbox, pending, run};
use outbox_testkit::webhook::{Receiver, Rule};
use outbox_testkit::TestSchema;
use std::io::Write;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// The `config check` line for `key`.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{out}"))
}

#[test]
fn precedence_file_then_env_then_flags() {
    let f = file("batch_size = 100\nlease = \"1m\"\nconcurrency = 3\n");
    let path = f.path().to_str().unwrap();

    let (ok, out, err) = run(&mut outbox(
        "outbox",
        &["--config", path, "config", "check"],
    ));
    assert!(ok, "{err}");
    assert!(
        line(&out, "batch_size").contains("100") && line(&out, "batch_size").contains("# file")
    );

    let mut cmd = outbox("outbox", &["--config", path, "config", "check"]);
    cmd.env("OUTBOX_BATCH_SIZE", "200");
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    assert!(line(&out, "batch_size").contains("200"), "{out}");
    assert!(
        line(&out, "batch_size").contains("# env OUTBOX_BATCH_SIZE"),
        "{out}"
    );
    assert!(line(&out, "lease").contains("# file"), "{out}");

    let mut cmd = outbox(
        "outbox",
        &["--config", path, "config", "check", "--batch-size", "300"],
    );
    cmd.env("OUTBOX_BATCH_SIZE", "200");
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    assert!(line(&out, "batch_size").contains("300"), "{out}");
    assert!(
        line(&out, "batch_size").contains("# flag --batch-size"),
        "{out}"
    );
    assert!(line(&out, "schema").contains("# flag --schema"), "{out}");
    assert!(line(&out, "concurrency").contains("3"), "{out}");
    assert!(line(&out, "publisher").contains("# default"), "{out}");

    // OUTBOX_CONFIG names the file too.
    let mut cmd = outbox("outbox", &["config", "check"]);
    cmd.env("OUTBOX_CONFIG", path);
    let (ok, out, _) = run(&mut cmd);
    assert!(ok && line(&out, "batch_size").contains("100"), "{out}");
}

#[tokio::test]
async fn the_relay_runs_with_the_effective_config() {
    let t = TestSchema::new("cli_cfg_relay").await;
    for _ in 0..5 {
        pending(&t).await;
    }
    let f = file("batch_size = 2\nnotify = \"off\"\nbackoff = \"1s,2s\"\n");
    let (ok, out, err) = run(&mut outbox(
        t.name(),
        &["--config", f.path().to_str().unwrap(), "relay", "--once"],
    ));
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "claimed=2 published=2 marked_sent=2 failed=0");
    // A flag beats the file.
    let (ok, out, err) = run(&mut outbox(
        t.name(),
        &[
            "--config",
            f.path().to_str().unwrap(),
            "relay",
            "--once",
            "--batch-size",
            "3",
        ],
    ));
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "claimed=3 published=3 marked_sent=3 failed=0");
}

/// A bad-configuration case: config file text, an environment variable,
/// the expected message.
type Case<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a str);

/// Each bad configuration fails with a message naming the problem, and
/// neither `migrate` (on a fresh schema) nor `relay --once` (on pending
/// rows) writes anything.
#[tokio::test]
async fn bad_configs_fail_clearly_and_write_nothing() {
    let t = TestSchema::new("cli_cfg_bad").await;
    pending(&t).await;
    let fresh = TestSchema::unmigrated("cli_cfg_fresh").await;
    let cases: &[Case<'_>] = &[
        (
            "bach_size = 5\n",
            None,
            "unknown key \"bach_size\" (did you mean batch_size?)",
        ),
        (
            "lease = \"5 parsecs\"\n",
            None,
            "lease = \"5 parsecs\" (from file",
        ),
        (
            "",
            Some(("OUTBOX_POLL_INTERVAL", "soon")),
            "poll_interval = \"soon\" (from env OUTBOX_POLL_INTERVAL)",
        ),
        (
            "batch_size = \"lots\"\n",
            None,
            "batch_size = \"lots\" (from file",
        ),
        (
            "max_attempts = 0\n",
            None,
            "max_attempts = \"0\" (from file",
        ),
        (
            "",
            Some(("DATABASE_URL", "mysql://root:hunter2@db/x")),
            "unsupported scheme \"mysql\"",
        ),
        (
            "metrics_addr = \"localhost\"\n",
            None,
            "metrics_addr = \"localhost\"",
        ),
        (
            "ordering = \"sideways\"\n",
            None,
            "ordering = \"sideways\" (from file",
        ),
        (
            "",
            Some(("OUTBOX_BUCKET_LEASE", "10ms")),
            "bucket_lease = \"10ms\" (from env OUTBOX_BUCKET_LEASE)",
        ),
    ];
    for (text, env, want) in cases {
        let f = file(text);
        let path = f.path().to_str().unwrap();
        for (schema, args) in [
            (fresh.name(), vec!["--config", path, "migrate"]),
            (t.name(), vec!["--config", path, "relay", "--once"]),
            (t.name(), vec!["--config", path, "config", "check"]),
        ] {
            let mut cmd = outbox(schema, &args);
            if let Some((k, v)) = env {
                cmd.env(k, v);
            }
            let (ok, out, err) = run(&mut cmd);
            assert!(!ok, "{args:?} with {text:?} {env:?} succeeded:\n{out}");
            assert!(err.contains(want), "{args:?}: want {want:?} in\n{err}");
            assert!(err.starts_with("error: invalid configuration: "), "{err}");
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "one problem, one line: {err}"
            );
            assert!(!err.contains("hunter2"), "{err}");
            assert!(out.is_empty(), "nothing on stdout: {out}");
        }
    }
    // A bad flag, too.
    let (ok, _, err) = run(&mut outbox(
        t.name(),
        &["relay", "--once", "--batch-size", "0"],
    ));
    assert!(
        !ok && err
            .contains("batch_size = \"0\" (from flag --batch-size): must be between 1 and 10000"),
        "{err}"
    );
    // Nothing was written: the fresh schema does not exist, the pending row
    // was not claimed or published.
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM pg_namespace WHERE nspname = '{}'",
            fresh.name()
        ))
        .await,
        0
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending' AND attempts = 0"
        )
        .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        0
    );
}

#[test]
fn bad_schema_names_are_refused() {
    let (ok, _, err) = run(&mut bare(&["--schema", "Bad-Name", "config", "check"]));
    assert!(
        !ok && err.contains("schema = \"Bad-Name\" (from flag --schema): invalid schema name"),
        "{err}"
    );
    let mut cmd = bare(&["migrate"]);
    cmd.env("OUTBOX_SCHEMA", "x; drop table y");
    let (ok, _, err) = run(&mut cmd);
    assert!(
        !ok && err.contains("(from env OUTBOX_SCHEMA): invalid schema name"),
        "{err}"
    );
    let f = file("schema = \"Bad-Name\"\n");
    let (ok, _, err) = run(&mut bare(&[
        "--config",
        f.path().to_str().unwrap(),
        "config",
        "check",
    ]));
    assert!(
        !ok && err.contains("schema = \"Bad-Name\" (from file"),
        "{err}"
    );
}

#[test]
fn config_check_never_prints_a_password() {
    let f = file("publisher = \"postgres://sink:filesecret@h/db\"\n");
    let mut cmd = outbox(
        "outbox",
        &["--config", f.path().to_str().unwrap(), "config", "check"],
    );
    cmd.env(
        "DATABASE_URL",
        "postgres://app:envsecret@127.0.0.1/db?password=querysecret",
    );
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    for secret in ["filesecret", "envsecret", "querysecret"] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} leaked:\n{out}"
        );
    }
    assert!(line(&out, "database_url").contains("app:***@"), "{out}");
    assert!(line(&out, "publisher").contains("sink:***@"), "{out}");

    // Flags and key=value connection strings too.
    let mut cmd = outbox(
        "outbox",
        &[
            "config",
            "check",
            "--database-url",
            "host=127.0.0.1 user=app password=flagsecret",
            "--publisher",
            "postgres://u:pubsecret@h/x",
        ],
    );
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    assert!(
        !out.contains("flagsecret") && !out.contains("pubsecret"),
        "{out}"
    );
}

/// `--ordering` and `--bucket-lease` from each source, as `config check`
/// shows them: defaults, then file < env < flag.
#[test]
fn ordering_and_bucket_lease_come_from_file_env_and_flags() {
    let (ok, out, err) = run(&mut outbox("outbox", &["config", "check"]));
    assert!(ok, "{err}");
    assert!(
        line(&out, "ordering").starts_with("ordering = \"aggregate\"")
            && line(&out, "ordering").ends_with("# default"),
        "{out}"
    );
    assert!(
        line(&out, "bucket_lease").starts_with("bucket_lease = \"30s\"")
            && line(&out, "bucket_lease").ends_with("# default"),
        "{out}"
    );

    let f = file("ordering = \"none\"\nbucket_lease = \"5s\"\n");
    let path = f.path().to_str().unwrap();
    let (ok, out, err) = run(&mut outbox(
        "outbox",
        &["--config", path, "config", "check"],
    ));
    assert!(ok, "{err}");
    assert!(
        line(&out, "ordering").starts_with("ordering = \"none\""),
        "{out}"
    );
    assert!(line(&out, "ordering").contains("# file"), "{out}");
    assert!(
        line(&out, "bucket_lease").starts_with("bucket_lease = \"5s\""),
        "{out}"
    );
    assert!(line(&out, "bucket_lease").contains("# file"), "{out}");

    let mut cmd = outbox("outbox", &["--config", path, "config", "check"]);
    cmd.env("OUTBOX_ORDERING", "aggregate")
        .env("OUTBOX_BUCKET_LEASE", "2s");
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    assert!(
        line(&out, "ordering").starts_with("ordering = \"aggregate\"")
            && line(&out, "ordering").contains("# env OUTBOX_ORDERING"),
        "{out}"
    );
    assert!(
        line(&out, "bucket_lease").starts_with("bucket_lease = \"2s\"")
            && line(&out, "bucket_lease").contains("# env OUTBOX_BUCKET_LEASE"),
        "{out}"
    );

    let mut cmd = outbox(
        "outbox",
        &[
            "--config",
            path,
            "config",
            "check",
            "--ordering",
            "none",
            "--bucket-lease",
            "1s",
        ],
    );
    cmd.env("OUTBOX_ORDERING", "aggregate")
        .env("OUTBOX_BUCKET_LEASE", "2s");
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "{err}");
    assert!(
        line(&out, "ordering").starts_with("ordering = \"none\"")
            && line(&out, "ordering").contains("# flag --ordering"),
        "{out}"
    );
    assert!(
        line(&out, "bucket_lease").starts_with("bucket_lease = \"1s\"")
            && line(&out, "bucket_lease").contains("# flag --bucket-lease"),
        "{out}"
    );
}

/// An unknown `--ordering` and a bucket lease under a second are each one
/// clear line and a non-zero exit, for `relay` and `config check` alike.
#[test]
fn bad_ordering_flags_are_one_clear_error() {
    for cmd in [vec!["relay", "--once"], vec!["config", "check"]] {
        for (flag, value, want) in [
            (
                "--ordering",
                "sideways",
                "ordering = \"sideways\" (from flag --ordering):",
            ),
            (
                "--bucket-lease",
                "10ms",
                "bucket_lease = \"10ms\" (from flag --bucket-lease):",
            ),
        ] {
            let mut args = cmd.clone();
            args.extend([flag, value]);
            let (ok, out, err) = run(&mut outbox("outbox", &args));
            assert!(!ok, "{args:?} succeeded:\n{out}");
            assert!(err.starts_with("error: invalid configuration: "), "{err}");
            assert!(err.contains(want), "{args:?}: want {want:?} in\n{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
            assert!(out.is_empty(), "nothing on stdout: {out}");
        }
    }
    // The messages say what would be right.
    let (_, _, err) = run(&mut outbox(
        "outbox",
        &["config", "check", "--ordering", "sideways"],
    ));
    assert!(err.contains("aggregate") && err.contains("none"), "{err}");
    let (_, _, err) = run(&mut outbox(
        "outbox",
        &["config", "check", "--bucket-lease", "10ms"],
    ));
    assert!(err.contains("at least 1s"), "{err}");
}

/// Relay flags, an environment variable, the expected `--once` line.
type RelayRun<'a> = (&'a [&'a str], Option<(&'a str, &'a str)>, &'a str);

/// The setting reaches the relay: message k of an aggregate is refused
/// (503) by a webhook receiver and k+1 is behind it in the same pass. With
/// ordering on (the default, or `aggregate` from any source) k+1 is held
/// back and never sent; with `none` (from the file, the environment or the
/// flag) the two go out side by side and k+1 is delivered.
#[tokio::test]
async fn ordering_decides_whether_a_failed_message_is_overtaken() {
    const HELD: &str = "claimed=2 published=0 marked_sent=0 failed=1 released=1";
    const OVERTAKEN: &str = "claimed=2 published=1 marked_sent=1 failed=1";
    let none = file("ordering = \"none\"\n");
    let none = none.path().to_str().unwrap().to_owned();
    let cases: &[RelayRun<'_>] = &[
        (&[], None, HELD),
        (&["--ordering", "aggregate"], None, HELD),
        (&["--ordering", "none"], None, OVERTAKEN),
        (&[], Some(("OUTBOX_ORDERING", "none")), OVERTAKEN),
        (&["--config", &none], None, OVERTAKEN),
        (
            &["--ordering", "aggregate"],
            Some(("OUTBOX_ORDERING", "none")),
            HELD,
        ),
    ];
    for (flags, env, want) in cases {
        let t = TestSchema::new("cli_cfg_ordering").await;
        let rx = Receiver::start().await;
        let client = t.pool.get().await.unwrap();
        let sql = format!(
            "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
             VALUES ('e', 'order', '7', 't', '{{}}'), ('e', 'order', '7', 't', '{{}}') \
             RETURNING id, event_id::text",
            t.schema.quoted()
        );
        let mut rows: Vec<(i64, String)> = client
            .query(sql.as_str(), &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        rows.sort();
        rx.respond(rows[0].1.clone(), Rule::status(503));
        let (config, rest): (Vec<&str>, Vec<&str>) = match flags {
            ["--config", path] => (vec!["--config", path], vec![]),
            f => (vec![], f.to_vec()),
        };
        let mut args = config;
        args.extend(["relay", "--once", "--publisher", rx.url.as_str()]);
        args.extend(rest);
        let mut cmd = outbox(t.name(), &args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let (ok, out, err) = tokio::task::spawn_blocking(move || run(&mut cmd))
            .await
            .unwrap();
        assert!(ok, "{args:?} {env:?}: {err}");
        assert_eq!(out.trim(), *want, "{args:?} {env:?}");
        let got: Vec<String> = rx.received().into_iter().map(|r| r.id).collect();
        assert!(got.contains(&rows[0].1), "k was tried: {got:?}");
        assert_eq!(
            got.contains(&rows[1].1),
            *want == OVERTAKEN,
            "{args:?} {env:?}: k+1 delivered? {got:?}"
        );
    }
}

/// One default per setting, declared once (config/keys/table.rs, from
/// `RelayConfig::default()`): `outbox relay --help`, `outbox config check`
/// and the README's performance table (which measures the defaults) all
/// say the same.
#[test]
fn every_default_agrees_across_help_config_check_and_readme() {
    let (ok, help, err) = run(&mut bare(&["relay", "--help"]));
    assert!(ok, "{err}");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut check = bare(&["config", "check"]);
    check.env_remove("DATABASE_URL");
    let (ok, out, err) = run(&mut check);
    assert!(ok, "{err}");
    for k in outbox_cli::config::keys() {
        let shown = k
            .shown_default()
            .map(|d| format!(" [default: {d}]"))
            .unwrap_or_default();
        let expected = format!("[env: {}]{shown}", k.env);
        assert!(help.contains(&expected), "--help lacks {expected}:\n{help}");
        match k.default_value() {
            Some(d) => {
                let l = line(&out, k.name);
                let value = l.split('#').next().unwrap().trim();
                let value = value.trim_start_matches(&format!("{} = ", k.name));
                assert_eq!(value.trim_matches('"'), d, "{l}");
                assert!(l.ends_with("# default"), "{l}");
            }
            None => assert!(out.contains(&format!("# {} is not set", k.name)), "{out}"),
        }
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let d = outbox_relay::RelayConfig::default();
    let measured = format!(
        "({} pipelines, order per aggregate: the defaults)",
        d.concurrency
    );
    assert!(
        readme.contains(&measured) && d.ordering == outbox_relay::relay::Ordering::Aggregate,
        "the README's performance table measures other settings than the defaults"
    );
}
