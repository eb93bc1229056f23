//! Exit statuses of every command, as docs/operations.md promises: 2 for a
//! usage or configuration error (before anything ran), 1 for a runtime
//! one; and `config check` refuses exactly what `relay` refuses.

use crate::common;

use common::bare;
use std::process::Command;

/// (exit code, stderr) of `cmd`.
fn status(cmd: &mut Command) -> (Option<i32>, String) {
    let o = cmd.output().expect("run outbox");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Publisher URLs the relay refuses at start, each for its own reason.
const REFUSED: &[&str] = &[
    "redis://127.0.0.1:6379?max_len=10",
    "rediss://127.0.0.1:6379",
    "nats://127.0.0.1:4222?ack_timeout=soon",
    "amqp://guest:guest@127.0.0.1:5672/%2f?exchange_typo=x",
    "mqtt://127.0.0.1:1883?qos=7",
    "asynq://127.0.0.1:6379?queue=",
    "kafka://127.0.0.1:9092?not.a.librdkafka.property=1",
    "postgres://postgres@127.0.0.1/db?sslmode=sometimes",
    "carrier-pigeon://loft",
];

/// Every scheme of every publisher this build declares, with an option
/// none of them documents, and every scheme one declares as not served
/// (`rediss://`, `amqps://`, `mqtts://`).
fn refused_by_declaration() -> Vec<String> {
    let mut urls = Vec::new();
    for d in outbox_relay::publishers::declarations() {
        // The webhook's query is its endpoint's own; postgres sinks take
        // libpq's parameters (`sslmode=sometimes` above).
        if !d.options.is_empty() {
            urls.extend(
                d.schemes
                    .iter()
                    .map(|s| format!("{s}://127.0.0.1:1?no_such_option=1")),
            );
        }
        urls.extend(
            d.not_served
                .iter()
                .map(|(s, _)| format!("{s}://127.0.0.1:1")),
        );
    }
    urls
}

#[test]
fn config_check_refuses_what_the_relay_refuses_with_the_same_words() {
    let declared = refused_by_declaration();
    assert!(declared.len() >= 9, "{declared:?}");
    for url in REFUSED
        .iter()
        .copied()
        .chain(declared.iter().map(String::as_str))
    {
        let (check, check_err) = status(&mut bare(&["config", "check", "--publisher", url]));
        let (relay, relay_err) = status(&mut bare(&["relay", "--once", "--publisher", url]));
        assert_eq!(
            check,
            Some(2),
            "config check --publisher {url}:\n{check_err}"
        );
        assert_eq!(relay, Some(2), "relay --publisher {url}:\n{relay_err}");
        assert_eq!(check_err, relay_err, "{url}");
        assert!(check_err.contains("publisher"), "{url}: {check_err}");
    }
    // A webhook's options come from the environment.
    let webhook = |args: &[&str]| {
        let mut c = bare(args);
        c.env("OUTBOX_WEBHOOK_TIMEOUT", "never");
        status(&mut c)
    };
    let hook = "http://127.0.0.1:1/hook";
    let (check, check_err) = webhook(&["config", "check", "--publisher", hook]);
    let (relay, relay_err) = webhook(&["relay", "--once", "--publisher", hook]);
    assert_eq!((check, relay), (Some(2), Some(2)), "{check_err}{relay_err}");
    assert_eq!(check_err, relay_err);
    assert!(check_err.contains("OUTBOX_WEBHOOK_TIMEOUT"), "{check_err}");
    // And passes what the relay takes, without connecting: nothing listens
    // on port 1.
    let every_scheme = outbox_relay::publishers::declarations()
        .into_iter()
        .flat_map(|d| d.schemes.iter().map(|s| format!("{s}://127.0.0.1:1")));
    for url in [
        "redis://127.0.0.1:1?maxlen=10",
        "nats://127.0.0.1:1?subject_prefix=app.&create_stream=APP",
        "kafka://127.0.0.1:1?acks=all",
        "postgres",
    ]
    .map(String::from)
    .into_iter()
    .chain(every_scheme)
    {
        let (code, err) = status(&mut bare(&["config", "check", "--publisher", &url]));
        assert_eq!(code, Some(0), "config check --publisher {url}:\n{err}");
    }
}

#[test]
fn usage_and_configuration_errors_exit_2_on_every_command() {
    let no_url = |args: &[&str]| {
        let mut c = bare(args);
        c.env_remove("DATABASE_URL");
        c
    };
    let cases: Vec<(&str, Command)> = vec![
        ("archive without --older-than", bare(&["archive"])),
        (
            "archive --batch-size 0",
            bare(&["archive", "--older-than", "7d", "--batch-size", "0"]),
        ),
        ("migrate without DATABASE_URL", no_url(&["migrate"])),
        ("relay without DATABASE_URL", no_url(&["relay", "--once"])),
        ("stats without DATABASE_URL", no_url(&["stats"])),
        ("dead list without DATABASE_URL", no_url(&["dead", "list"])),
        (
            "archive without DATABASE_URL",
            no_url(&["archive", "--older-than", "7d"]),
        ),
        ("ui without DATABASE_URL", no_url(&["ui", "--read-only"])),
        (
            "relay with a bad option",
            bare(&["relay", "--once", "--publisher", REFUSED[0]]),
        ),
        ("a bad schema name", bare(&["--schema", "x;y", "stats"])),
        ("an unknown flag", bare(&["stats", "--no-such-flag"])),
        ("ui --interval 100ms", bare(&["ui", "--interval", "100ms"])),
        (
            "ui beyond this host without a token",
            bare(&["ui", "--addr", "0.0.0.0:1"]),
        ),
        ("bench --runs 0", bare(&["bench", "drain", "--runs", "0"])),
        (
            "bench produce --producers 0",
            bare(&["bench", "produce", "--producers", "0"]),
        ),
    ];
    for (what, mut cmd) in cases {
        let (code, err) = status(&mut cmd);
        assert_eq!(code, Some(2), "{what}:\n{err}");
        assert!(err.starts_with("error"), "{what}: one error line:\n{err}");
    }
}

#[test]
fn runtime_errors_exit_1() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("postgres://postgres@127.0.0.1:{closed}/postgres");
    for args in [
        &["migrate"][..],
        &["stats"],
        &["dead", "list"],
        &["archive", "--older-than", "7d"],
        &["relay", "--once"],
    ] {
        let (code, err) = status(bare(args).env("DATABASE_URL", &down));
        assert_eq!(code, Some(1), "{args:?} with the database down:\n{err}");
        assert!(err.contains("cannot connect"), "{args:?}: {err}");
    }
}

/// `[env: OUTBOX_CONFIG=]` on every `--help` said the variable was set to
/// nothing when it was unset.
#[test]
fn help_shows_no_empty_variable_values() {
    for args in [
        &["--help"][..],
        &["relay", "--help"],
        &["config", "check", "--help"],
    ] {
        let o = bare(args).env_remove("OUTBOX_CONFIG").output().unwrap();
        assert!(o.status.success());
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(help.contains("[env: OUTBOX_CONFIG]"), "{args:?}:\n{help}");
        assert!(!help.contains("=]"), "{args:?}:\n{help}");
    }
}
