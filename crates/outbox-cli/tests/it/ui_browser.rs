//! The operator page in a real browser: `tests/browser/ui_test.py` drives
//! Debian's Chromium headless with Playwright against the real binaries,
//! `outbox ui` and `outbox relay` (to a webhook receiver), on a seeded
//! schema. scripts/test.sh installs Chromium and Playwright.

use crate::common;

use common::net::{free_port, get, wait_for, Running};
use common::{dead, outbox, python};
use outbox_testkit::webhook::Receiver;
use outbox_testkit::TestSchema;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TOKEN: &str = "browser-test-token-0123456789";

/// The system Chromium (`OUTBOX_TEST_CHROMIUM` to use another).
fn chromium() -> PathBuf {
    let path = std::env::var_os("OUTBOX_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh once (it installs Debian's chromium), \
         or apt-get install chromium",
        path.display()
    );
    path
}

#[tokio::test]
async fn the_page_in_a_browser() {
    let chromium = chromium();
    let t = TestSchema::new("ui_browser").await;
    for _ in 0..3 {
        common::pending(&t).await;
    }
    let d1 = dead(&t, "orders", 1).await;
    let event_id: String = t
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            &format!(
                "SELECT event_id::text FROM {}.messages WHERE id = $1",
                t.schema.quoted()
            ),
            &[&d1],
        )
        .await
        .unwrap()
        .get(0);
    let rx = Receiver::start().await;
    let _relay = Running(
        outbox(t.name(), &["relay", "--publisher", &rx.url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _ui = Running(
        outbox(t.name(), &["ui", "--addr", &addr, "--interval", "1s"])
            .env("OUTBOX_UI_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the operator page", || {
        get(port, "/assets/ui.css").is_some()
    });
    // The three pending messages go first: the page then shows one dead.
    rx.wait_for(3).await;

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("tests/browser/ui_test.py");
    // Into the build directory: a test run leaves the checkout as it was.
    // `OUTBOX_UI_SCREENSHOT=docs/ui.png` refreshes the README's picture.
    let screenshot = std::env::var_os("OUTBOX_UI_SCREENSHOT")
        .map(|p| root.join(p))
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui.png"));
    let url = format!("http://{addr}/");
    let dead_id = d1.to_string();
    let mut cmd = Command::new(python());
    cmd.arg(&script)
        .args(["--url", &url, "--token", TOKEN])
        .args(["--database-url", &outbox_testkit::database_url()])
        .args(["--schema", t.name(), "--dead-id", &dead_id])
        .arg("--screenshot")
        .arg(&screenshot)
        .arg("--chromium")
        .arg(&chromium);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "browser test failed:\n{stdout}\n{stderr}"
    );
    // The replayed dead letter reached the webhook.
    let got: Vec<String> = rx.received().into_iter().map(|r| r.id).collect();
    assert!(got.contains(&event_id), "{event_id} not delivered: {got:?}");
}
