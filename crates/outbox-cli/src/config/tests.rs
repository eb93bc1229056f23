use super::*;
use std::io::Write;
use std::time::Duration;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn defaults_match_the_relay_defaults() {
    let s = load(None, &[], env_of(&[])).unwrap();
    let c = s.relay_config();
    let d = RelayConfig::default();
    assert_eq!(c.batch_size, d.batch_size);
    assert_eq!(c.lease, d.lease);
    assert_eq!(c.publish_timeout, d.publish_timeout);
    assert_eq!(c.retry, d.retry);
    assert_eq!(c.idle_sleep, d.idle_sleep);
    assert_eq!(c.notify, d.notify);
    assert_eq!(c.concurrency, d.concurrency);
    assert_eq!(c.ordering, d.ordering);
    assert_eq!(c.bucket_lease, d.bucket_lease);
    assert_eq!(c.rate_limit, None);
    assert_eq!(s.schema.name(), "outbox");
    assert_eq!(s.source("batch_size"), &Source::Default);
}

#[test]
fn file_then_env_then_flags() {
    let f = file("batch_size = 100\nlease = \"1m\"\nnotify = false\nbackoff = [\"2s\", \"4s\"]\n");
    let env = env_of(&[("OUTBOX_BATCH_SIZE", "200"), ("OUTBOX_LEASE", "")]);
    let s = load(Some(f.path()), &[], &env).unwrap();
    assert_eq!(s.relay.batch_size, 200);
    assert_eq!(s.source("batch_size"), &Source::Env("OUTBOX_BATCH_SIZE"));
    // An empty variable does not override the file.
    assert_eq!(s.relay.lease, Duration::from_secs(60));
    assert_eq!(s.source("lease"), &Source::File(f.path().to_owned()));
    assert!(!s.relay.notify);
    assert_eq!(s.relay.retry.schedule, [2, 4].map(Duration::from_secs));

    let flags = [
        ("batch_size", "300".to_owned()),
        ("rate_limit", "50".to_owned()),
    ];
    let s = load(Some(f.path()), &flags, &env).unwrap();
    assert_eq!(s.relay.batch_size, 300);
    assert_eq!(s.source("batch_size"), &Source::Flag("--batch-size"));
    assert_eq!(s.relay_config().rate_limit, Some(50));
}

#[test]
fn every_problem_is_reported_with_key_value_and_source() {
    let f = file("bach_size = 5\nlease = \"5 parsecs\"\nconcurrency = \"many\"\n");
    let env = env_of(&[
        ("DATABASE_URL", "mysql://root:hunter2@db/x"),
        ("OUTBOX_SCHEMA", "Bad-Name"),
        ("OUTBOX_METRICS_ADDR", "localhost"),
    ]);
    let err = load(Some(f.path()), &[("max_attempts", "0".into())], &env).unwrap_err();
    let text = err.to_string();
    let shown = f.path().display().to_string();
    assert_eq!(err.0.len(), 7, "{text}");
    assert!(
        text.contains(&format!(
            "config file {shown}: unknown key \"bach_size\" (did you mean batch_size?)"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("lease = \"5 parsecs\" (from file {shown})")),
        "{text}"
    );
    assert!(text.contains("concurrency = \"many\""), "{text}");
    assert!(
        text.contains(
            "database_url = \"mysql://root:***@db/x\" (from env DATABASE_URL): unsupported scheme"
        ),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("schema = \"Bad-Name\" (from env OUTBOX_SCHEMA)"),
        "{text}"
    );
    assert!(text.contains("metrics_addr = \"localhost\""), "{text}");
    assert!(
        text.contains("max_attempts = \"0\" (from flag --max-attempts): must be between"),
        "{text}"
    );
}

#[test]
fn bad_files_are_named() {
    let missing = load(
        Some(Path::new("/nonexistent/outbox.toml")),
        &[],
        env_of(&[]),
    )
    .unwrap_err();
    assert!(missing
        .to_string()
        .contains("cannot read config file /nonexistent/outbox.toml"));
    let f = file("schema = \"x\"\nbatch_size = \n");
    let e = load(Some(f.path()), &[], env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not valid TOML (line 2): "), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let f = file("[relay]\nbatch_size = 1\n");
    let e = load(Some(f.path()), &[], env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown key \"relay\""), "{e}");
}

#[test]
fn off_unsets_optional_keys() {
    let f = file("rate_limit = 10\narchive_after = \"1d\"\n");
    let env = env_of(&[("OUTBOX_RATE_LIMIT", "off")]);
    let s = load(Some(f.path()), &[("archive_after", "none".into())], &env).unwrap();
    assert_eq!(s.relay.rate_limit, None);
    assert_eq!(s.relay.archive_after, None);
}

#[test]
fn render_is_toml_with_sources_and_no_password() {
    let env = env_of(&[("DATABASE_URL", "postgres://app:s3cret@db/x")]);
    let flags = [
        ("publisher", "postgres://sink:t0psecret@other/y".to_owned()),
        ("rate_limit", "50".to_owned()),
    ];
    let s = load(None, &flags, &env).unwrap();
    let out = s.render();
    assert!(
        !out.contains("s3cret") && !out.contains("t0psecret"),
        "{out}"
    );
    assert!(out.contains("# env DATABASE_URL"), "{out}");
    assert!(out.contains("# flag --publisher"), "{out}");
    assert!(out.contains("batch_size = 500"), "{out}");
    assert!(out.contains("# relay_id is not set"), "{out}");
    // The output reads back as a config file.
    let back: toml::Table = out.parse().unwrap();
    assert_eq!(back["batch_size"].as_integer(), Some(500));
    assert_eq!(back["rate_limit"].as_integer(), Some(50));
    assert_eq!(back["archive_after"].as_str(), Some("off"));
}

#[test]
fn publish_timeout_comes_from_file_env_or_flag() {
    let f = file("publish_timeout = \"10s\"\n");
    let s = load(Some(f.path()), &[], env_of(&[])).unwrap();
    assert_eq!(s.relay_config().publish_timeout, Duration::from_secs(10));
    let env = env_of(&[("OUTBOX_PUBLISH_TIMEOUT", "5s")]);
    let s = load(Some(f.path()), &[], &env).unwrap();
    assert_eq!(s.relay.publish_timeout, Duration::from_secs(5));
    let flags = [("publish_timeout", "2s".to_owned())];
    let s = load(Some(f.path()), &flags, &env).unwrap();
    assert_eq!(s.relay.publish_timeout, Duration::from_secs(2));
    assert_eq!(
        s.source("publish_timeout"),
        &Source::Flag("--publish-timeout")
    );
}

#[test]
fn a_lease_or_publish_timeout_too_short_to_work_is_one_clear_error() {
    let err = load(None, &[("lease", "1ms".into())], env_of(&[]))
        .unwrap_err()
        .to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "invalid configuration: lease = \"1ms\" (from flag --lease): must be at least 1s"
        ),
        "{err}"
    );
    let env = env_of(&[("OUTBOX_PUBLISH_TIMEOUT", "1ms")]);
    let err = load(None, &[], env).unwrap_err().to_string();
    assert!(
        err.contains(
            "publish_timeout = \"1ms\" (from env OUTBOX_PUBLISH_TIMEOUT): must be at least 100ms"
        ),
        "{err}"
    );
    // Exactly the minimums load, and the relay accepts what loads.
    let at_minimum = [("lease", "1s".into()), ("publish_timeout", "100ms".into())];
    let s = load(None, &at_minimum, env_of(&[])).unwrap();
    s.relay_config().validate().unwrap();
}

#[test]
fn one_problem_is_one_line() {
    let err = load(None, &[("lease", "soon".into())], env_of(&[])).unwrap_err();
    let text = err.to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("invalid configuration: lease = \"soon\" (from flag --lease): "),
        "{text}"
    );
}

#[test]
fn check_output_loads_back_as_a_config_file() {
    let flags = [
        ("batch_size", "42".to_owned()),
        ("backoff", "2s,1m".to_owned()),
        ("notify", "off".to_owned()),
        ("rate_limit", "7".to_owned()),
        ("metrics_addr", "127.0.0.1:9090".to_owned()),
    ];
    let first = load(None, &flags, env_of(&[])).unwrap();
    let f = file(&first.render());
    let again = load(Some(f.path()), &[], env_of(&[])).unwrap();
    assert_eq!(again.relay.batch_size, 42);
    assert_eq!(again.relay.retry.schedule, first.relay.retry.schedule);
    assert!(!again.relay.notify);
    assert_eq!(again.relay.rate_limit, Some(7));
    assert_eq!(again.metrics_addr, first.metrics_addr);
    assert_eq!(again.relay_id, None);
}

#[test]
fn observability_keys() {
    let s = load(None, &[], env_of(&[])).unwrap();
    assert_eq!(s.metrics_topics, TopicLabels::Capped(100));
    assert_eq!(s.log_format, LogFormat::Text);
    let f = file("metrics_topics = \"off\"\nlog_format = \"json\"\n");
    let s = load(Some(f.path()), &[], env_of(&[])).unwrap();
    assert_eq!(s.metrics_topics, TopicLabels::Off);
    assert_eq!(s.log_format, LogFormat::Json);
    let flags = [("metrics_topics", "20".to_owned())];
    let s = load(Some(f.path()), &flags, env_of(&[])).unwrap();
    assert_eq!(s.metrics_topics, TopicLabels::Capped(20));
    let env = env_of(&[
        ("OUTBOX_LOG_FORMAT", "xml"),
        ("OUTBOX_METRICS_TOPICS", "lots"),
    ]);
    let e = load(None, &[], env).unwrap_err().to_string();
    assert!(
        e.contains("log_format = \"xml\" (from env OUTBOX_LOG_FORMAT): expected text or json"),
        "{e}"
    );
    assert!(e.contains("metrics_topics"), "{e}");
}

#[test]
fn numbers_rust_reads_but_toml_does_not_render_as_strings_and_load_back() {
    // Found by the config_file fuzz target: `05` and `.5` were rendered
    // bare, which is not TOML, so `outbox config` printed a file that
    // did not load.
    let flags = [
        ("batch_size", "05".to_owned()),
        ("jitter", ".5".to_owned()),
        ("max_attempts", "+3".to_owned()),
    ];
    let first = load(None, &flags, env_of(&[])).unwrap();
    let out = first.render();
    let again = load_str(Path::new("rendered.toml"), &out, &[], env_of(&[])).unwrap();
    assert_eq!(again.relay.batch_size, 5);
    assert_eq!(again.relay.retry.jitter, 0.5);
    assert_eq!(again.relay.retry.max_attempts, 3);
}

#[test]
fn durations_past_a_century_are_refused_before_the_relay_overflows() {
    // Found by the config_file fuzz target: backoff = "300000y" loaded,
    // and the relay panicked computing the first retry time.
    let e = load_str(
        Path::new("c.toml"),
        "backoff = [\"1s\", \"300000y\"]\nlease = \"1000y\"\n",
        &[],
        env_of(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("backoff") && e.contains("lease"), "{e}");
    assert!(e.contains("at most 100 years"), "{e}");
}

#[test]
fn byte_sizes_take_binary_units_and_reach_the_relay() {
    let env = env_of(&[
        ("OUTBOX_MAX_BATCH_BYTES", "4MiB"),
        ("OUTBOX_MAX_MESSAGE_BYTES", "1000"),
    ]);
    let c = load(None, &[], env).unwrap().relay_config();
    assert_eq!((c.max_batch_bytes, c.max_message_bytes), (4 << 20, 1000));
    let d = load(None, &[], env_of(&[])).unwrap().relay_config();
    let r = RelayConfig::default();
    assert_eq!(
        (d.max_batch_bytes, d.max_message_bytes),
        (r.max_batch_bytes, r.max_message_bytes)
    );
    assert_eq!(parse::bytes("512 KiB"), Ok(512 << 10));
    assert!(parse::bytes("0").is_err());
    assert!(parse::bytes("lots").is_err());
}

/// docs/operations.md's table of settings is the key table, rendered
/// ([`markdown_table`]); `OUTBOX_UPDATE_DOCS=1` rewrites it.
#[test]
fn docs_table_is_the_key_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = text
        .find("<!-- settings table: generated")
        .expect("the table's start marker");
    let begin = begin + text[begin..].find('\n').unwrap() + 1;
    let end = text
        .find("<!-- end of settings table -->")
        .expect("the table's end marker");
    let table = markdown_table();
    if std::env::var_os("OUTBOX_UPDATE_DOCS").is_some() {
        let updated = format!("{}{table}{}", &text[..begin], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &text[begin..end],
        table,
        "docs/operations.md's settings table differs from config/keys/table.rs: run OUTBOX_UPDATE_DOCS=1 cargo test -p outbox-cli docs_table"
    );
}

/// Every default the table shows loads back as the engine's own default.
#[test]
fn every_shown_default_is_the_engines() {
    let text: String = keys()
        .iter()
        .filter_map(|k| {
            k.default_value()
                .map(|d| format!("{} = {}\n", k.name, toml::Value::String(d)))
        })
        .collect();
    let s = load_str(Path::new("defaults.toml"), &text, &[], env_of(&[])).unwrap();
    let (c, d) = (s.relay_config(), RelayConfig::default());
    assert_eq!(c.batch_size, d.batch_size);
    assert_eq!(c.max_batch_bytes, d.max_batch_bytes);
    assert_eq!(c.max_message_bytes, d.max_message_bytes);
    assert_eq!(c.lease, d.lease);
    assert_eq!(c.publish_timeout, d.publish_timeout);
    assert_eq!(c.retry, d.retry);
    assert_eq!(c.idle_sleep, d.idle_sleep);
    assert_eq!(c.reap_interval, d.reap_interval);
    assert_eq!(c.notify, d.notify);
    assert_eq!(c.concurrency, d.concurrency);
    assert_eq!(c.rate_limit, d.rate_limit);
    assert_eq!(c.archive_after, d.archive_after);
    assert_eq!(c.ordering, d.ordering);
    assert_eq!(c.bucket_lease, d.bucket_lease);
    assert_eq!(
        s.metrics_topics,
        outbox_relay::metrics::TopicLabels::default()
    );
    assert_eq!(s.log_format, crate::logging::LogFormat::default());
    assert_eq!(s.schema.name(), outbox::DEFAULT_SCHEMA);
}

/// The webhook's settings are keys like any other (declared in its folder):
/// file, env and flag reach the publisher's settings, a bad value is one
/// line naming the key, and the secret is never printed.
#[test]
fn publisher_settings_load_like_every_key_and_reach_the_publisher() {
    use outbox_relay::publishers::http::setting;
    let f = file("webhook_secret = \"whsec_c2VjcmV0LWJ5dGVz\"\nwebhook_timeout = \"2s\"\n");
    let env = env_of(&[("OUTBOX_WEBHOOK_CONCURRENCY", "4")]);
    let flags = [("webhook_timeout", "3s".to_owned())];
    let s = load(Some(f.path()), &flags, &env).unwrap();
    let p = &s.publisher_settings;
    assert_eq!(p.get(setting::SECRET), Some("whsec_c2VjcmV0LWJ5dGVz"));
    assert_eq!(p.get(setting::TIMEOUT), Some("3s"));
    assert_eq!(p.get(setting::CONCURRENCY), Some("4"));
    assert_eq!(p.get(setting::SOURCE), Some("/outbox"));
    assert_eq!(
        s.source("webhook_timeout"),
        &Source::Flag("--webhook-timeout")
    );
    let out = s.render();
    assert!(!out.contains("c2VjcmV0"), "{out}");
    assert!(out.contains("webhook_secret = \"***\""), "{out}");
    assert!(out.contains("webhook_concurrency = 4"), "{out}");
    let http = outbox_relay::publishers::http::HttpConfig::with_settings("http://h/", p).unwrap();
    assert_eq!(http.timeout, Duration::from_secs(3));
    assert_eq!(http.concurrency, 4);

    let env = env_of(&[
        ("OUTBOX_WEBHOOK_TIMEOUT", "never"),
        ("OUTBOX_WEBHOOK_SECRET", "whsec_not-base64-hunter2!"),
    ]);
    let e = load(None, &[], env).unwrap_err().to_string();
    assert!(
        e.contains("webhook_timeout = \"never\" (from env OUTBOX_WEBHOOK_TIMEOUT): must be a positive duration"),
        "{e}"
    );
    assert!(
        e.contains("webhook_secret = \"***\" (from env OUTBOX_WEBHOOK_SECRET): the part after whsec_ is not valid base64"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
}

/// The operator page's token is a key: env or file, never a flag, never
/// printed; a short one is refused like any bad value.
#[test]
fn the_ui_token_is_a_hidden_key() {
    let s = load(None, &[], env_of(&[])).unwrap();
    assert!(s.ui_token.is_none());
    let token = "tok-0123456789abcdef-hunter2";
    let s = load(None, &[], env_of(&[("OUTBOX_UI_TOKEN", token)])).unwrap();
    assert_eq!(s.ui_token.as_ref().map(|t| t.expose()), Some(token));
    assert_eq!(s.source("ui_token"), &Source::Env("OUTBOX_UI_TOKEN"));
    let out = s.render();
    assert!(
        !out.contains("hunter2") && out.contains("ui_token = \"***\""),
        "{out}"
    );
    assert!(!format!("{s:?}").contains("hunter2"));
    let f = file(&format!("ui_token = \"{token}\"\n"));
    let s = load(Some(f.path()), &[], env_of(&[])).unwrap();
    assert_eq!(s.ui_token.as_ref().map(|t| t.expose()), Some(token));
    let e = load(None, &[], env_of(&[("OUTBOX_UI_TOKEN", "hunter2")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "invalid configuration: ui_token = \"***\" (from env OUTBOX_UI_TOKEN): shorter than 16 characters; use a random one, e.g. `openssl rand -hex 24`"
    );
}
