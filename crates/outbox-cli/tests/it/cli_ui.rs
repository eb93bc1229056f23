//! `outbox ui`, over HTTP against the real binary: who may act (token,
//! cookie, cross-site refusal), escaping of what the database holds,
//! replay and purge, the page on the relay's metrics server. The cost of
//! many viewers: `cli_ui_fanout.rs`.

use crate::common;

use common::net::{free_port, get, wait_for, Running};
use common::ui::{client, sse_events, start, TOKEN};
use common::{dead, outbox, run};
use outbox_testkit::TestSchema;
use reqwest::header::{AUTHORIZATION, COOKIE, ORIGIN, SET_COOKIE};
use reqwest::StatusCode;
use std::process::Stdio;
use std::time::Duration;

async fn status(t: &TestSchema, id: i64) -> String {
    let sql = format!(
        "SELECT status FROM {}.all_messages WHERE id = $1",
        t.schema.quoted()
    );
    let c = t.pool.get().await.unwrap();
    c.query_opt(&sql, &[&id])
        .await
        .unwrap()
        .map_or_else(|| "gone".to_owned(), |r| r.get(0))
}

/// Signs in through the login form as a browser would; returns the cookie.
async fn sign_in(port: u16) -> String {
    let r = client()
        .post(format!("http://127.0.0.1:{port}/login"))
        .header("Sec-Fetch-Site", "same-origin")
        .header(ORIGIN, format!("http://127.0.0.1:{port}"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{attr} missing: {set}");
    }
    assert!(
        !set.contains(TOKEN),
        "the cookie carries the token itself: {set}"
    );
    set.split(';').next().unwrap().to_owned()
}

#[test]
fn bad_addresses_and_tokens_fail_with_one_clear_line() {
    // No database is reached: every check comes first.
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (
            &["ui", "--addr", "0.0.0.0:0"],
            None,
            "without OUTBOX_UI_TOKEN",
        ),
        (
            &["ui", "--addr", "localhost:9091"],
            None,
            "invalid socket address",
        ),
        (
            &["ui", "--addr", "127.0.0.1:0"],
            Some("short"),
            "shorter than 16",
        ),
        (&["ui", "--interval", "10ms"], None, "at least 500ms"),
        (&["ui", "--interval", "soon"], None, "--interval"),
    ];
    for (args, token, want) in cases {
        let mut cmd = outbox("t_never_created", args);
        cmd.env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none");
        if let Some(tok) = token {
            cmd.env("OUTBOX_UI_TOKEN", tok);
        }
        let (ok, _, err) = run(&mut cmd);
        assert!(!ok, "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            err.trim().lines().count() <= 3,
            "{args:?}: not one clear error:\n{err}"
        );
    }
}

#[tokio::test]
async fn beyond_loopback_read_only_is_allowed_and_said() {
    let t = TestSchema::new("cli_ui_readonly").await;
    let port = free_port();
    let addr = format!("0.0.0.0:{port}");
    let mut child = outbox(t.name(), &["ui", "--addr", &addr, "--read-only"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _ui = Running(child);
    let first = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stderr)
            .lines()
            .next()
            .unwrap()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(first.contains("off (read-only)"), "{first}");
    wait_for("the page", || get(port, "/").is_some_and(|(s, _)| s == 200));
    let id = dead(&t, "orders", 1).await;
    // Read-only: even the right token acts on nothing.
    let r = client()
        .post(format!("http://127.0.0.1:{port}/replay"))
        .header(AUTHORIZATION, format!("Bearer {TOKEN}"))
        .form(&[("id", id.to_string()), ("confirm", "yes".into())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(status(&t, id).await, "dead");
}

#[tokio::test]
async fn actions_need_the_token_and_refuse_other_sites() {
    let t = TestSchema::new("cli_ui_auth").await;
    let id = dead(&t, "orders", 1).await;
    let (_ui, port) = start(&t, &[], Some(TOKEN));
    let url = format!("http://127.0.0.1:{port}/replay");
    let form = [("id", id.to_string()), ("confirm", "yes".to_owned())];
    let http = client();
    let post = |h: &[(&str, String)]| {
        let mut req = http.post(&url).form(&form);
        for (k, v) in h {
            req = req.header(*k, v);
        }
        req.send()
    };
    let cookie = sign_in(port).await;
    let origin = format!("http://127.0.0.1:{port}");
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, StatusCode);
    let refused: Vec<Case<'_>> = vec![
        ("no credentials", vec![], StatusCode::UNAUTHORIZED),
        (
            "wrong token",
            vec![("authorization", "Bearer nope-nope-nope-nope".into())],
            StatusCode::UNAUTHORIZED,
        ),
        (
            "right token, cross-site",
            vec![
                ("authorization", format!("Bearer {TOKEN}")),
                ("sec-fetch-site", "cross-site".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, cross-site",
            vec![
                ("cookie", cookie.clone()),
                ("sec-fetch-site", "cross-site".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, same-site (a sibling subdomain)",
            vec![
                ("cookie", cookie.clone()),
                ("sec-fetch-site", "same-site".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, no Sec-Fetch-Site nor Origin",
            vec![("cookie", cookie.clone())],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, another Origin",
            vec![
                ("cookie", cookie.clone()),
                ("origin", "http://evil.example".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "forged cookie",
            vec![
                ("cookie", "outbox_ui_session=0000".into()),
                ("sec-fetch-site", "same-origin".into()),
            ],
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (what, headers, want) in refused {
        let r = post(&headers).await.unwrap();
        assert_eq!(r.status(), want, "{what}");
        assert_eq!(status(&t, id).await, "dead", "{what} replayed it");
    }
    // A GET never acts.
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    // A login forged by another site is refused too.
    let r = http
        .post(format!("{origin}/login"))
        .header("sec-fetch-site", "cross-site")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // The cookie with an Origin naming this host (a browser without
    // Sec-Fetch-Site): first the confirmation, then the replay.
    let unconfirmed = http
        .post(&url)
        .header(COOKIE, &cookie)
        .header(ORIGIN, &origin)
        .form(&[("id", id.to_string())])
        .send()
        .await
        .unwrap();
    assert_eq!(unconfirmed.status(), StatusCode::OK);
    assert!(unconfirmed
        .text()
        .await
        .unwrap()
        .contains("name=\"confirm\""));
    assert_eq!(status(&t, id).await, "dead", "replayed before confirmation");
    let r = post(&[("cookie", cookie.clone()), ("origin", origin.clone())])
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/?replayed=1");
    assert_eq!(status(&t, id).await, "pending");
    let by = t
        .count(&format!(
            "SELECT count(*) FROM {}.dead_replays WHERE message_id = {id} \
               AND replayed_by = 'outbox-ui (cookie from 127.0.0.1)'",
            t.schema.quoted()
        ))
        .await;
    assert_eq!(by, 1);

    // Bearer, as a script would: replaying it again is refused (not dead).
    let r = post(&[("authorization", format!("Bearer {TOKEN}"))])
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn what_the_database_holds_is_shown_as_text() {
    let t = TestSchema::new("cli_ui_escape").await;
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           headers, status, attempts, last_error, dead_at, dead_reason) \
         VALUES ('<b>type</b>', 'a', '\"><svg onload=alert(3)>', '<img src=x onerror=alert(2)>', \
           '{{\"html\": \"</pre><script>alert(4)</script>\"}}', '{{\"h\": \"<i>x</i>\"}}', \
           'dead', 3, 'err\r\nwith <script>alert(5)</script>', now(), \
           '<script>alert(1)</script>') RETURNING id",
        t.schema.quoted()
    );
    let id: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
    let (_ui, port) = start(&t, &[], Some(TOKEN));
    let base = format!("http://127.0.0.1:{port}");
    let page = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let detail = reqwest::get(format!("{base}/dead/{id}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let filtered = reqwest::get(format!("{base}/?q=%3Cscript%3E"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (what, body) in [
        ("page", &page),
        ("detail", &detail),
        ("filtered", &filtered),
    ] {
        for raw in ["<script>alert", "<img src", "<svg", "<b>type", "<i>x"] {
            assert!(!body.contains(raw), "{what} holds raw {raw:?}:\n{body}");
        }
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{what}: {body}"
        );
    }
    assert!(
        detail.contains("&lt;/pre&gt;&lt;script&gt;alert(4)"),
        "{detail}"
    );
    assert!(detail.contains("&lt;script&gt;alert(5)"), "{detail}");
    // The live event is one line of JSON whose HTML is escaped the same way
    // (the \r\n in the error cannot split the event).
    let events = sse_events(port, 1, Duration::from_secs(10)).await;
    let data = &events[0].1;
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    let dead_html = v["dead"].as_str().unwrap();
    assert!(dead_html.contains("&lt;script&gt;alert(1)"), "{dead_html}");
    assert!(!dead_html.contains("<script>"), "{dead_html}");
    assert!(!v["live"].as_str().unwrap().contains("<img"));
    assert!(
        filtered.contains(&format!("data-id=\"{id}\"")),
        "{filtered}"
    );
}

#[tokio::test]
async fn replay_matching_a_filter_and_purge() {
    let t = TestSchema::new("cli_ui_matching").await;
    let a1 = dead(&t, "a", 1).await;
    let a2 = dead(&t, "a", 1).await;
    let b = dead(&t, "b", 1).await;
    let old = dead(&t, "c", 48).await;
    t.exec(&format!(
        "UPDATE {}.messages SET dead_reason = 'timeout talking to broker' WHERE id = {a2}",
        t.schema.quoted()
    ))
    .await;
    let (_ui, port) = start(&t, &[], Some(TOKEN));
    let http = client();
    let act = |path: &str, form: Vec<(&'static str, &'static str)>| {
        http.post(format!("http://127.0.0.1:{port}{path}"))
            .header(AUTHORIZATION, format!("Bearer {TOKEN}"))
            .form(&form)
            .send()
    };
    // The confirmation says how many match.
    let r = act("/replay-matching", vec![("topic", "a"), ("q", "TIMEOUT")])
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("Replay all 1 matching"));
    let r = act(
        "/replay-matching",
        vec![("topic", "a"), ("q", "TIMEOUT"), ("confirm", "yes")],
    )
    .await
    .unwrap();
    assert_eq!(r.headers()["location"], "/?replayed=1");
    assert_eq!(status(&t, a2).await, "pending");
    assert_eq!(status(&t, a1).await, "dead");
    assert_eq!(status(&t, b).await, "dead");
    // A filtered list shows only what matches.
    let page = reqwest::get(format!("http://127.0.0.1:{port}/?topic=a"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("data-id=\"{a1}\"")));
    assert!(!page.contains(&format!("data-id=\"{b}\"")));
    let r = act("/purge", vec![("older_than", "1d"), ("confirm", "yes")])
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/?purged=1");
    assert_eq!(status(&t, old).await, "gone");
    assert_eq!(status(&t, a1).await, "dead");
    let r = act(
        "/purge",
        vec![("older_than", "whenever"), ("confirm", "yes")],
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

/// The relay's `--metrics-addr` server serves the same page at `/`, with
/// the breaker's state the relay knows; without a token, read-only.
#[tokio::test]
async fn the_relay_serves_the_page_at_its_metrics_address() {
    let t = TestSchema::new("cli_ui_relay").await;
    let id = dead(&t, "orders", 1).await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _relay = Running(
        outbox(t.name(), &["relay", "--metrics-addr", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the relay's page", || {
        get(port, "/").is_some_and(|(s, body)| s == 200 && body.contains("id=\"breaker\">closed"))
    });
    let (_, page) = get(port, "/").unwrap();
    assert!(page.contains("Read-only"), "{page}");
    assert!(page.contains(&format!("data-id=\"{id}\"")), "{page}");
    assert_eq!(get(port, "/healthz").unwrap().0, 200);
    assert!(get(port, "/metrics")
        .unwrap()
        .1
        .contains("outbox_breaker_open"));
    let r = client()
        .post(format!("http://{addr}/replay"))
        .header(AUTHORIZATION, format!("Bearer {TOKEN}"))
        .form(&[("id", id.to_string()), ("confirm", "yes".into())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(status(&t, id).await, "dead");
}

/// The page's breaker is the relay's own: with the destination down (a
/// webhook where nothing listens) and a message waiting, the relay opens
/// its breaker and the page says `open`.
#[tokio::test]
async fn the_page_shows_the_relays_breaker_open_when_the_destination_is_down() {
    let t = TestSchema::new("cli_ui_breaker").await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('e', 'a', '1', 't', '{}')",
    )
    .await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let nowhere = format!("http://127.0.0.1:{}/hook", free_port());
    let _relay = Running(
        outbox(
            t.name(),
            &["relay", "--metrics-addr", &addr, "--publisher", &nowhere],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    wait_for("the page to show the breaker open", || {
        get(port, "/").is_some_and(|(s, body)| s == 200 && body.contains("id=\"breaker\">open"))
    });
}

/// The README's line, as written: a fresh token from `openssl rand -hex
/// 24`, then `outbox ui` on the default address, actions on.
#[tokio::test]
async fn the_readme_command_serves_the_page() {
    let t = TestSchema::new("cli_ui_readme").await;
    let line = "OUTBOX_UI_TOKEN=$(openssl rand -hex 24) outbox ui";
    let (assignment, command) = line.split_once(") ").unwrap();
    let generator = assignment.strip_prefix("OUTBOX_UI_TOKEN=$(").unwrap();
    let argv: Vec<&str> = generator.split_whitespace().collect();
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{generator} failed");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(token.len(), 48, "{token}");
    assert!(
        std::net::TcpListener::bind("127.0.0.1:9091").is_ok(),
        "127.0.0.1:9091, the README's address, is taken: stop what listens there"
    );
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let _ui = Running(
        outbox(t.name(), &args)
            .env("OUTBOX_UI_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the page on 127.0.0.1:9091", || {
        get(9091, "/").is_some_and(|(s, _)| s == 200)
    });
    let (_, page) = get(9091, "/").unwrap();
    // With a token the page offers to sign in; without one it says read-only.
    assert!(page.contains("Sign in to act"), "{page}");
}

/// Beyond loopback with a token, the page's data needs the token too:
/// payloads and errors are the producers' data.
#[tokio::test]
async fn beyond_loopback_with_a_token_reading_needs_it_too() {
    let t = TestSchema::new("cli_ui_private").await;
    let id = dead(&t, "orders", 1).await;
    let port = free_port();
    let addr = format!("0.0.0.0:{port}");
    let _ui = Running(
        outbox(t.name(), &["ui", "--addr", &addr])
            .env("OUTBOX_UI_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the page", || get(port, "/").is_some_and(|(s, _)| s == 200));
    let row = format!("data-id=\"{id}\"");
    let (_, page) = get(port, "/").unwrap();
    assert!(
        page.contains("id=\"private\"") && !page.contains(&row),
        "{page}"
    );
    assert_eq!(get(port, "/events").unwrap().0, 401);
    assert_eq!(get(port, &format!("/dead/{id}")).unwrap().0, 401);
    let base = format!("http://127.0.0.1:{port}");
    let with_bearer = client()
        .get(format!("{base}/"))
        .header(AUTHORIZATION, format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(with_bearer.contains(&row), "{with_bearer}");
    let cookie = sign_in(port).await;
    let detail = client()
        .get(format!("{base}/dead/{id}"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(detail.status(), StatusCode::OK);
}

/// A relay whose metrics port listens beyond loopback (for a scraper)
/// does not show the page there without a token.
#[tokio::test]
async fn the_relay_beyond_loopback_serves_no_page_without_a_token() {
    let t = TestSchema::new("cli_ui_relay_wide").await;
    dead(&t, "orders", 1).await;
    let port = free_port();
    let addr = format!("0.0.0.0:{port}");
    let _relay = Running(
        outbox(t.name(), &["relay", "--metrics-addr", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the metrics server", || {
        get(port, "/healthz").is_some_and(|(s, _)| s == 200)
    });
    assert_eq!(get(port, "/").unwrap().0, 404);
    assert_eq!(get(port, "/events").unwrap().0, 404);
    assert_eq!(get(port, "/metrics").unwrap().0, 200);
}
