//! PostgreSQL dies in the middle of a run (immediate stop: every connection
//! cut, crash recovery on start) and comes back: the relay reconnects by
//! itself, keeps running, and each of two relays sends again within about
//! a second of the database's return, and every committed message ends sent.

use crate::common;

use common::net::Running;
use common::outbox_at as outbox;
use outbox_tempdb::EmbeddedPostgres;
use std::process::{Command, Stdio};
use std::time::Duration;

async fn query(url: &str, sql: &str) -> Option<i64> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    let row = client.query_one(sql, &[]).await.ok()?;
    Some(row.get(0))
}

async fn wait_for(url: &str, sql: &str, want: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let got = query(url, sql).await.unwrap_or(-1);
        if got >= want || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const ENQUEUE: &str =
    "INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
     SELECT 'e', 'a', g::text, 't', '{}' FROM generate_series(1, 200) g";

async fn enqueue(url: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    assert_eq!(client.execute(ENQUEUE, &[]).await.unwrap(), 200);
}

#[tokio::test]
async fn the_relay_rides_out_a_postgres_restart() {
    let _solo = common::solo().await;
    let pg = EmbeddedPostgres::start(true).expect("a private PostgreSQL for this test");
    let url = pg.url();
    assert!(outbox(&url, &["migrate"]).status().unwrap().success());
    // Two relays, as in production: each owns half the aggregates, and
    // each must come back by itself.
    let spawn = |id: &str| {
        outbox(
            &url,
            &[
                "relay",
                "--relay-id",
                id,
                "--lease",
                "2s",
                "--reap-interval",
                "500ms",
                "--poll-interval",
                "100ms",
                "--batch-size",
                "20",
                // No wake-up by NOTIFY after the restart: the pipelines' own
                // retry pause is what brings them back (as through a pooler).
                "--notify",
                "off",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Running)
        .unwrap()
    };
    let mut relays = [spawn("r1"), spawn("r2")];

    let sent = "SELECT count(*) FROM outbox.all_messages WHERE status = 'sent'";
    enqueue(&url).await;
    assert!(
        wait_for(&url, sent, 1).await >= 1,
        "the relay is publishing"
    );

    assert_eq!(wait_for(&url, sent, 200).await, 200);
    let last_before = query(
        &url,
        "SELECT coalesce(max(id), 0) FROM outbox.published_events",
    )
    .await
    .unwrap();
    pg.stop_server().unwrap();
    // Down long enough for the retry pause to reach its cap.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for r in relays.iter_mut() {
        assert!(
            r.0.try_wait().unwrap().is_none(),
            "a relay must not exit while the database is down"
        );
    }
    pg.start_server().unwrap();
    let back = tokio::time::Instant::now();

    enqueue(&url).await;
    // Each relay's first delivery after the return, from the sink's rows
    // (`publisher` is the relay id).
    for id in ["r1", "r2"] {
        let sql = format!(
            "SELECT count(*) FROM outbox.published_events WHERE id > {last_before} AND publisher = '{id}'"
        );
        assert!(wait_for(&url, &sql, 1).await >= 1, "{id} sends again");
        let resumed = back.elapsed();
        // Within about MAX_RETRY_PAUSE (0.5 s) of the database answering
        // again; the slack is for a busy 2-core machine, not for the pause.
        assert!(
            resumed < Duration::from_secs(2),
            "relay {id} sent again {resumed:?} after the database came back"
        );
        eprintln!("relay {id} sent again within {resumed:?} of the database's return");
    }
    let total = wait_for(&url, sent, 400).await;
    let mut statuses = Vec::new();
    for r in relays.iter_mut() {
        assert!(r.0.try_wait().unwrap().is_none(), "still running");
        Command::new("kill")
            .args(["-TERM", &r.0.id().to_string()])
            .status()
            .unwrap();
        statuses.push(r.0.wait().unwrap());
    }

    assert_eq!(total, 400, "every committed message ends sent");
    assert_eq!(
        query(
            &url,
            "SELECT count(*) FROM outbox.all_messages WHERE status <> 'sent'"
        )
        .await,
        Some(0)
    );
    assert_eq!(
        query(
            &url,
            "SELECT count(DISTINCT message_id) FROM outbox.published_events"
        )
        .await,
        Some(400)
    );
    for status in statuses {
        assert!(status.success(), "clean exit after SIGTERM: {status:?}");
    }
}
