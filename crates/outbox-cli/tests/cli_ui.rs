//! `outbox ui`, over HTTP against the real binary: who may act (token,
//! cookie, cross-site refusal), escaping of what the database holds,
//! replay and purge, and one count per interval however many watch.

mod common;

use common::net::{free_port, get, wait_for, Running};
use common::{dead, outbox, run};
use outbox_testkit::TestSchema;
use reqwest::header::{AUTHORIZATION, COOKIE, ORIGIN, SET_COOKIE};
use reqwest::StatusCode;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const TOKEN: &str = "test-token-0123456789abcdef";

/// `outbox ui` on a free loopback port, once it answers.
fn start(t: &TestSchema, extra: &[&str], token: Option<&str>) -> (Running, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["ui", "--addr", addr.as_str()];
    args.extend(extra);
    let mut cmd = outbox(t.name(), &args);
    if let Some(tok) = token {
        cmd.env("OUTBOX_UI_TOKEN", tok);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ui = Running(child);
    wait_for("the operator page to answer", || {
        get(port, "/assets/ui.css").is_some()
    });
    (ui, port)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

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

/// Opens `/events` and collects `(seq, data)` of each snapshot event for
/// `how_long`, or until `n` arrived.
async fn sse_events(port: u16, n: usize, how_long: Duration) -> Vec<(u64, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(s).lines();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + how_long;
    while got.len() < n {
        let line = match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            _ => break,
        };
        // Chunked framing leaves size lines between events; only data matters.
        if let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            got.push((v["seq"].as_u64().unwrap(), data.to_owned()));
        }
    }
    got
}

/// Scans of the schema's hot table so far (sequential and index), as the
/// statistics collector counts them: a database-side count of what the
/// page's queries cost, whoever sent them.
async fn scans(t: &TestSchema) -> i64 {
    let c = t.pool.get().await.unwrap();
    c.execute("SELECT pg_stat_clear_snapshot()", &[])
        .await
        .unwrap();
    c.query_one(
        "SELECT (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::int8 \
           FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'messages'",
        &[&t.name()],
    )
    .await
    .unwrap()
    .get(0)
}

/// Runs the page for `how_long` with `clients` SSE clients; returns each
/// client's snapshot numbers and the hot-table scans the run cost.
async fn watch_with(t: &TestSchema, clients: usize, how_long: Duration) -> (Vec<Vec<u64>>, i64) {
    let before = scans(t).await;
    let (ui, port) = start(t, &["--interval", "1s"], None);
    let tasks: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(sse_events(port, usize::MAX, how_long)))
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.push(task.await.unwrap().into_iter().map(|(s, _)| s).collect());
    }
    // Ending the process ends its connections; each backend flushes its
    // statistics as it exits. Wait until none is left.
    std::process::Command::new("kill")
        .args(["-TERM", &ui.0.id().to_string()])
        .status()
        .unwrap();
    drop(ui);
    settle(t).await;
    (seqs, scans(t).await - before)
}

/// Waits until no other session's last statement named the schema: each
/// has ended, and flushed its statistics as it did.
async fn settle(t: &TestSchema) {
    let c = t.pool.get().await.unwrap();
    let pattern = format!("%{}%", t.name());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                  WHERE pid <> pg_backend_pid() AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sessions on the schema stay open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn fifty_viewers_cost_the_database_what_one_does() {
    // Created and seeded on a connection of its own, closed before measuring,
    // so no scan of the setup is counted late (a session flushes its
    // statistics when it ends, or up to 10 s after its last statement).
    let t = TestSchema::unmigrated("cli_ui_fanout").await;
    {
        let (client, conn) =
            tokio_postgres::connect(&outbox_testkit::database_url(), tokio_postgres::NoTls)
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        outbox::migrate(&client, &t.schema).await.unwrap();
        let q = t.schema.quoted();
        client
            .batch_execute(&format!(
                "INSERT INTO {q}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                   SELECT 'e', 'a', i::text, 'orders', '{{}}' FROM generate_series(1, 20) i; \
                 INSERT INTO {q}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
                   status, attempts, dead_at, dead_reason) \
                   VALUES ('e', 'a', 'x', 'orders', '{{}}', 'dead', 3, now(), 'no')"
            ))
            .await
            .unwrap();
        drop(client);
        conn.await.unwrap().unwrap();
    }
    settle(&t).await;
    let how_long = Duration::from_secs(5);
    let (one, one_scans) = watch_with(&t, 1, how_long).await;
    let (fifty, fifty_scans) = watch_with(&t, 50, how_long).await;
    eprintln!(
        "hot-table scans in {how_long:?} at a 1 s interval: 1 viewer {one_scans}, \
         50 viewers {fifty_scans}; snapshots seen: {:?} / {:?}",
        one[0], fifty[0]
    );
    // Every viewer sees the same snapshots: one count, fanned out.
    let first = &fifty[0];
    assert!(first.len() >= 3, "too few snapshots: {first:?}");
    for (i, s) in fifty.iter().enumerate() {
        let common: Vec<&u64> = s.iter().filter(|x| first.contains(x)).collect();
        assert!(
            common.len() + 1 >= s.len().min(first.len()),
            "viewer {i}: {s:?} vs {first:?}"
        );
    }
    // At most one count per interval (plus the first, at once).
    let max_snapshots = how_long.as_secs() + 2;
    let seen = fifty.iter().flatten().max().unwrap() - fifty.iter().flatten().min().unwrap() + 1;
    assert!(seen <= max_snapshots, "{seen} snapshots in {how_long:?}");
    // And the database agrees: fifty viewers cost what one does, within
    // one snapshot's scans (the two runs' windows differ by a tick).
    let per_snapshot = one_scans as f64 / one[0].len().max(1) as f64;
    assert!(
        (fifty_scans as f64) <= one_scans as f64 + 2.0 * per_snapshot,
        "50 viewers: {fifty_scans} scans, 1 viewer: {one_scans}"
    );
    // Each snapshot scans the hot table a fixed few times, whoever watches.
    let snapshots = fifty.iter().flatten().max().unwrap();
    assert!(
        fifty_scans as u64 <= 3 * snapshots,
        "{fifty_scans} scans for {snapshots} snapshots"
    );
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
