//! The README's shell commands, each run by a test. `COVERED` names, for
//! every command line in the README's `sh` blocks, the test that runs it;
//! `every_readme_shell_command_names_the_test_that_runs_it` fails when the
//! README gains a command no test runs (or loses one the table still names).
//! The tests here run those no other file runs, as written, on PostgreSQL
//! alone; the README's Rust snippets compile in `crates/outbox-readme`.

use crate::common;

use common::{dead, run};
use outbox_testkit::TestSchema;
use std::path::{Path, PathBuf};
use std::process::Command;

/// README command line (comment stripped) → `file::test` that runs it.
/// Files are relative to the workspace root.
const COVERED: &[(&str, &str)] = &[
    // The two commands.
    (
        "cargo run -p outbox-cli -- demo tour",
        "crates/outbox-cli/tests/it/cli.rs::tour_without_database_url_runs_on_a_throwaway_postgres",
    ),
    (
        "./scripts/test.sh",
        "crates/outbox-cli/tests/it/readme.rs::the_test_script_has_the_modes_the_readme_names",
    ),
    // Install.
    (
        "sudo apt-get install gcc make pkg-config libssl-dev postgresql",
        "crates/outbox-cli/tests/it/readme.rs::the_readme_installs_the_packages_the_scripts_name",
    ),
    (
        "cargo install --locked --path crates/outbox-cli",
        "crates/outbox-cli/tests/it/readme.rs::cargo_install_and_cargo_run_find_the_outbox_binary",
    ),
    (
        "outbox --version",
        "crates/outbox-cli/tests/it/cli.rs::version_is_what_the_readme_shows",
    ),
    // Run the relay.
    (
        "export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres",
        "crates/outbox-cli/tests/it/readme.rs::the_readme_database_url_is_the_one_the_tests_use",
    ),
    (
        "outbox migrate",
        "crates/outbox-cli/tests/it/readme.rs::run_the_relay_as_written",
    ),
    (
        "outbox relay --publisher redis://127.0.0.1:6379",
        "crates/outbox-cli/tests/it/relay_streams.rs::the_readme_relay_runs_against_redis_until_sigint",
    ),
    (
        "outbox relay --once",
        "crates/outbox-cli/tests/it/readme.rs::run_the_relay_as_written",
    ),
    (
        "outbox config check",
        "crates/outbox-cli/tests/it/readme.rs::run_the_relay_as_written",
    ),
    // Operations and observability.
    (
        "outbox stats [--json]",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    (
        "outbox dead list [--topic T] [--limit N] [--json]",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    (
        "outbox dead show ID",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    (
        "outbox dead replay ID… | --all | --topic T",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    (
        "outbox dead purge --older-than 30d",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    (
        "outbox archive --older-than 7d [--delete] [--include-dead]",
        "crates/outbox-cli/tests/it/readme.rs::operations_as_written",
    ),
    // The operator page.
    (
        "OUTBOX_UI_TOKEN=$(openssl rand -hex 24) outbox ui",
        "crates/outbox-cli/tests/it/cli_ui.rs::the_readme_command_serves_the_page",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

/// Every line of the README's `sh` blocks, its trailing `# comment` cut.
fn shell_commands(readme: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = !in_sh && line == "```sh";
            continue;
        }
        if in_sh && !line.trim().is_empty() {
            let (cmd, comment) = line.split_once(" # ").unwrap_or((line, ""));
            out.push((cmd.trim().to_owned(), comment.trim().to_owned()));
        }
    }
    out
}

fn comment_of(command: &str) -> String {
    shell_commands(&readme())
        .into_iter()
        .find(|(c, _)| c == command)
        .unwrap_or_else(|| panic!("the README shows `{command}`"))
        .1
}

#[test]
fn every_readme_shell_command_names_the_test_that_runs_it() {
    let shown: Vec<String> = shell_commands(&readme())
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    for c in &shown {
        assert!(
            COVERED.iter().any(|(k, _)| k == c),
            "README command `{c}` is run by no test: add one and name it in COVERED"
        );
    }
    for (c, by) in COVERED {
        assert!(
            shown.contains(&c.to_string()),
            "the README no longer shows `{c}`"
        );
        let (file, test) = by.split_once("::").unwrap();
        let source =
            std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            source.contains(&format!("fn {test}(")),
            "{file} has no test {test} (named for `{c}`)"
        );
    }
}

/// `outbox …` as written (the README's argv), on `t`'s schema through
/// `OUTBOX_SCHEMA` so that the command line itself is unchanged.
fn as_written(t: &TestSchema, command: &str) -> String {
    let argv: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(argv[0], "outbox", "{command}");
    let mut cmd = common::bare(&argv[1..]);
    cmd.env("OUTBOX_SCHEMA", t.name());
    let (ok, out, err) = run(&mut cmd);
    assert!(ok, "`{command}` failed:\n{err}\n{out}");
    out
}

#[tokio::test]
async fn run_the_relay_as_written() {
    let t = TestSchema::unmigrated("readme_relay").await;
    // `--print` (named in its comment): cli.rs::migrate_dry_run_names_the_migrations_and_writes_nothing.
    let applied = as_written(&t, "outbox migrate");
    assert!(applied.contains("applied 0001_init"), "{applied}");
    assert!(as_written(&t, "outbox migrate").contains("up to date"));

    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('order.created', 'order', '42', 'orders', '{\"order_id\": 42}')",
    )
    .await;
    let once = as_written(&t, "outbox relay --once");
    assert_eq!(once, "claimed=1 published=1 marked_sent=1 failed=0\n");
    // The comment shows the line's shape: `one pass: claimed=N published=N …`.
    let shape: String = once
        .trim()
        .chars()
        .map(|c| if c.is_ascii_digit() { 'N' } else { c })
        .collect();
    assert!(
        comment_of("outbox relay --once").ends_with(&shape),
        "{shape}"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.published_events")
            .await,
        1
    );

    let check = as_written(&t, "outbox config check");
    assert!(check.contains(t.name()), "{check}");
}

/// The operations block's synopses, each form run: `[x]` both without and
/// with `x`, `a | b` each alternative, `ID`, `T`, `N` real values.
#[tokio::test]
async fn operations_as_written() {
    let t = TestSchema::new("readme_ops").await;
    let first = dead(&t, "orders", 24 * 40).await;
    let second = dead(&t, "orders", 1).await;
    dead(&t, "payments", 1).await;
    let forms: &[(&str, &[String])] = &[
        (
            "outbox stats [--json]",
            &["outbox stats".into(), "outbox stats --json".into()],
        ),
        (
            "outbox dead list [--topic T] [--limit N] [--json]",
            &[
                "outbox dead list".into(),
                "outbox dead list --topic orders".into(),
                "outbox dead list --limit 1".into(),
                "outbox dead list --json".into(),
                "outbox dead list --topic orders --limit 1 --json".into(),
            ],
        ),
        (
            "outbox dead show ID",
            &[format!("outbox dead show {first}")],
        ),
        (
            "outbox dead replay ID… | --all | --topic T",
            &[
                format!("outbox dead replay {first} {second}"),
                "outbox dead replay --topic payments".into(),
                "outbox dead replay --all".into(),
            ],
        ),
        (
            "outbox dead purge --older-than 30d",
            &["outbox dead purge --older-than 30d".into()],
        ),
        (
            "outbox archive --older-than 7d [--delete] [--include-dead]",
            &[
                "outbox archive --older-than 7d".into(),
                "outbox archive --older-than 7d --delete".into(),
                "outbox archive --older-than 7d --include-dead".into(),
                "outbox archive --older-than 7d --delete --include-dead".into(),
            ],
        ),
    ];
    let shown: Vec<String> = shell_commands(&readme())
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    for (synopsis, runs) in forms {
        assert!(
            shown.contains(&synopsis.to_string()),
            "README lacks `{synopsis}`"
        );
        for command in runs.iter() {
            let out = as_written(&t, command);
            if command.ends_with("--json") {
                serde_json::from_str::<serde_json::Value>(&out)
                    .unwrap_or_else(|e| panic!("`{command}`: {e}\n{out}"));
            }
            if command.starts_with("outbox dead show") {
                assert!(out.contains("broker said no"), "{out}");
            }
        }
    }
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        0,
        "every dead letter was replayed"
    );
}

/// CI runs `./scripts/test.sh` itself; here, that the script is where the
/// README says and offers the `--postgres-only` mode the README names.
#[test]
fn the_test_script_has_the_modes_the_readme_names() {
    let out = Command::new(root().join("scripts/test.sh"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--postgres-only"), "{help}");
    assert!(readme().contains("./scripts/test.sh --postgres-only"));
}

/// The README's `apt-get install` names only packages the scripts install
/// or name themselves (scripts/test.sh's `need_package`, scripts/services.sh's
/// `installed`), so both stay in step.
#[test]
fn the_readme_installs_the_packages_the_scripts_name() {
    let scripts = ["scripts/test.sh", "scripts/services.sh"]
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap())
        .join("\n");
    // `need_package "why" pkg…` and `installed Name binary pkg`.
    let mut named: Vec<&str> = Vec::new();
    for l in scripts.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix("need_package \"") {
            named.extend(rest.split('"').nth(1).unwrap_or("").split_whitespace());
        } else if let Some(rest) = l.strip_prefix("installed ") {
            named.extend(rest.split_whitespace().nth(2));
        }
    }
    let lines: Vec<String> = shell_commands(&readme())
        .into_iter()
        .map(|(c, _)| c)
        .filter(|c| c.contains("apt-get install"))
        .collect();
    assert!(!lines.is_empty(), "the README shows its apt-get line");
    for line in lines {
        let packages = line.split("apt-get install").nth(1).unwrap();
        for p in packages.split_whitespace() {
            assert!(
                named.contains(&p),
                "README installs {p}, which scripts/test.sh and scripts/services.sh do not name ({named:?})"
            );
        }
    }
}

/// `cargo install --locked --path crates/outbox-cli` without the long
/// build: the lock file resolves as it is (`--locked`), the path is the
/// package whose one binary is `outbox` (also what `cargo run -p outbox-cli`
/// runs).
#[test]
fn cargo_install_and_cargo_run_find_the_outbox_binary() {
    let line = shell_commands(&readme())
        .into_iter()
        .map(|(c, _)| c)
        .find(|c| c.starts_with("cargo install"))
        .expect("the README shows its cargo install line");
    let path = line
        .split("--path ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap();
    assert!(line.contains("--locked"), "{line}");
    let manifest = root().join(path).join("Cargo.toml").canonicalize().unwrap();
    let cargo = || {
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(root());
        c
    };
    // `--locked`: Cargo.lock resolves the package as it stands.
    let out = cargo()
        .args([
            "tree",
            "--locked",
            "--offline",
            "--depth",
            "0",
            "-p",
            "outbox-cli",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree --locked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| Path::new(p["manifest_path"].as_str().unwrap()) == manifest)
        .unwrap_or_else(|| panic!("no workspace package at {path}"));
    assert_eq!(package["name"], "outbox-cli");
    let bins: Vec<&str> = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        bins,
        ["outbox"],
        "one binary, so `cargo run -p outbox-cli` needs no --bin"
    );
}

/// The README's `DATABASE_URL` is the tests' default and scripts/test.sh's.
#[test]
fn the_readme_database_url_is_the_one_the_tests_use() {
    let line = shell_commands(&readme())
        .into_iter()
        .map(|(c, _)| c)
        .find(|c| c.starts_with("export DATABASE_URL="))
        .expect("the README exports DATABASE_URL");
    let url = line.trim_start_matches("export DATABASE_URL=");
    let script = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    assert!(
        script.contains(&format!("DATABASE_URL:-{url}")),
        "scripts/test.sh defaults to another DATABASE_URL than the README's {url}"
    );
    let testkit = std::fs::read_to_string(root().join("crates/outbox-testkit/src/lib.rs")).unwrap();
    assert!(
        testkit.contains(&format!("\"{url}\"")),
        "outbox-testkit defaults to another DATABASE_URL than the README's {url}"
    );
}

/// README "Operations": `outbox relay --archive-after 7d` (in the prose, not
/// a `sh` block; no other test starts the binary with it) starts, says it
/// runs, and ends cleanly on SIGTERM.
#[tokio::test]
async fn the_relay_with_archive_after_starts_as_written() {
    use std::io::{BufRead, BufReader};
    let t = TestSchema::new("readme_archive_after").await;
    assert!(readme().contains("`outbox relay --archive-after 7d`"));
    let mut child = common::bare(&["relay", "--archive-after", "7d"])
        .env("OUTBOX_SCHEMA", t.name())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("relay running"), "{first}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "a clean exit on SIGTERM: {status:?} {rest:?}"
    );
}

/// Before the two commands, the README says what the first build needs and
/// costs; the crate count is what `cargo run -p outbox-cli` compiles.
#[test]
fn the_readme_says_what_the_first_build_needs_before_the_two_commands() {
    let readme = readme();
    let section = readme
        .split("## The two commands")
        .nth(1)
        .and_then(|s| s.split("```sh").next())
        .expect("a section The two commands");
    for needed in [
        "Rust",
        "C compiler",
        "make",
        "pkg-config",
        "OpenSSL",
        "minutes",
    ] {
        assert!(
            section.contains(needed),
            "{needed} missing from:\n{section}"
        );
    }
    let said: usize = section
        .split(" crates")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no crate count in:\n{section}"));
    let tree = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "outbox-cli",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(tree.status.success(), "{tree:?}");
    let mut crates: Vec<String> = String::from_utf8_lossy(&tree.stdout)
        .lines()
        .map(|l| l.replace(" (*)", "").replace(" (proc-macro)", ""))
        .collect();
    crates.sort();
    crates.dedup();
    let off = said.abs_diff(crates.len()) as f64 / crates.len() as f64;
    assert!(
        off < 0.05,
        "the README says {said} crates, cargo tree counts {}",
        crates.len()
    );
}

/// scripts/test.sh's header names a README section that exists.
#[test]
fn the_test_script_points_at_a_readme_section() {
    let script = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    let section = script
        .lines()
        .nth(1)
        .and_then(|l| l.split("README \"").nth(1))
        .and_then(|r| r.split('"').next())
        .expect("test.sh's second line names a README section");
    assert!(
        readme().contains(&format!("\n## {section}\n")),
        "README has no section {section:?}"
    );
}
