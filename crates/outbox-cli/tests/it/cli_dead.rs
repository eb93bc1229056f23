//! `outbox dead …` on the real binary and PostgreSQL.

use crate::common;

use common::{dead, fails, ok, pending};
use outbox_testkit::TestSchema;

#[tokio::test]
async fn list_filters_and_json_parses() {
    let t = TestSchema::new("cli_dead_list").await;
    let a = dead(&t, "orders", 1).await;
    let b = dead(&t, "payments", 1).await;
    pending(&t).await;

    let text = ok(&t, &["dead", "list"]);
    assert!(
        text.contains("orders") && text.contains("payments"),
        "{text}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&ok(&t, &["dead", "list", "--json"])).unwrap();
    let ids: Vec<i64> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [a, b]);

    let json: serde_json::Value =
        serde_json::from_str(&ok(&t, &["dead", "list", "--topic", "payments", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["id"].as_i64(), Some(b));
    assert_eq!(json[0]["dead_reason"], "permanent: broker said no");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&t, &["dead", "list", "--limit", "1", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn show_prints_every_field() {
    let t = TestSchema::new("cli_dead_show").await;
    let id = dead(&t, "orders", 1).await;
    let out = ok(&t, &["dead", "show", &id.to_string()]);
    for want in [
        "dead_at: 2",
        "dead_reason: permanent: broker said no",
        "last_error: broker said no",
        "attempts: 10",
        "\"order_id\": 1",
        "\"trace\":\"t1\"",
        "event_id: ",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&t, &["dead", "show", &id.to_string(), "--json"])).unwrap();
    assert_eq!(json["payload"]["order_id"], 1);

    let p = pending(&t).await;
    let err = fails(&t, &["dead", "show", &p.to_string()]);
    assert!(
        err.contains(&format!("message {p} is not dead (status pending)")),
        "{err}"
    );
    let err = fails(&t, &["dead", "show", "424242"]);
    assert!(err.contains("message 424242 not found"), "{err}");
}

#[tokio::test]
async fn replay_by_id_records_who() {
    let t = TestSchema::new("cli_dead_replay").await;
    let a = dead(&t, "orders", 1).await;
    let b = dead(&t, "orders", 1).await;
    let out = ok(
        &t,
        &["dead", "replay", &a.to_string(), "--by", "ops-oncall"],
    );
    assert_eq!(out.trim(), "replayed=1");
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {a} AND status = 'pending' \
               AND attempts = 0 AND dead_at IS NULL AND dead_reason IS NULL"
        ))
        .await,
        1
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.dead_replays WHERE message_id = {a} \
               AND replayed_by = 'ops-oncall' AND dead_reason = 'permanent: broker said no'"
        ))
        .await,
        1
    );
    // b is untouched.
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {b} AND status = 'dead'"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn replay_of_ids_not_dead_changes_nothing() {
    let t = TestSchema::new("cli_dead_replay_bad").await;
    let a = dead(&t, "orders", 1).await;
    let p = pending(&t).await;
    let err = fails(
        &t,
        &["dead", "replay", &a.to_string(), &p.to_string(), "999999"],
    );
    assert!(err.contains("nothing was replayed"), "{err}");
    assert!(
        err.contains(&format!("message {p} is not dead (status pending)")),
        "{err}"
    );
    assert!(err.contains("message 999999 not found"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one clear error: {err}");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.dead_replays").await,
        0
    );
    // Neither ids nor --all nor --topic: a usage error.
    fails(&t, &["dead", "replay"]);
}

#[tokio::test]
async fn replay_all_and_by_topic() {
    let t = TestSchema::new("cli_dead_replay_all").await;
    dead(&t, "orders", 1).await;
    dead(&t, "payments", 1).await;
    dead(&t, "payments", 1).await;
    assert_eq!(
        ok(&t, &["dead", "replay", "--topic", "payments"]).trim(),
        "replayed=2"
    );
    assert_eq!(
        t.count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead' AND topic = 'orders'"
        )
        .await,
        1
    );
    assert_eq!(ok(&t, &["dead", "replay", "--all"]).trim(), "replayed=1");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.dead_replays").await,
        3
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        0
    );
}

#[tokio::test]
async fn purge_deletes_only_older_dead_rows() {
    let t = TestSchema::new("cli_dead_purge").await;
    dead(&t, "orders", 72).await;
    dead(&t, "orders", 49).await;
    let young = dead(&t, "orders", 1).await;
    pending(&t).await;
    assert_eq!(
        ok(&t, &["dead", "purge", "--older-than", "2d"]).trim(),
        "purged=2"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'dead'")
            .await,
        1
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {young}"
        ))
        .await,
        1
    );
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages WHERE status = 'pending'")
            .await,
        1
    );
    let err = fails(&t, &["dead", "purge", "--older-than", "soon"]);
    assert!(err.contains("soon") || err.contains("duration"), "{err}");
}

/// A dead row whose created_at migration 10 refuses (dead rows are exempt)
/// stays dead on replay instead of failing the whole replay.
#[tokio::test]
async fn replay_leaves_rows_with_a_refused_created_at_dead_and_says_so() {
    let t = TestSchema::new("cli_dead_replay_created").await;
    let good = dead(&t, "orders", 1).await;
    let bad = dead(&t, "orders", 1).await;
    t.exec(&format!(
        "UPDATE {{schema}}.messages SET created_at = 'infinity' WHERE id = {bad}"
    ))
    .await;
    let (ok_, out, err) = common::run(&mut common::outbox(t.name(), &["dead", "replay", "--all"]));
    assert!(ok_, "{err}");
    assert_eq!(out.trim(), "replayed=1");
    assert!(err.contains("skipped=1"), "{err}");
    let err = fails(&t, &["dead", "replay", &bad.to_string()]);
    assert!(
        err.contains(&format!("message {bad} has headers or a created_at")),
        "{err}"
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {good} AND status = 'pending'"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn replay_leaves_rows_with_refused_headers_dead_and_says_so() {
    let t = TestSchema::new("cli_dead_replay_headers").await;
    let good = dead(&t, "orders", 1).await;
    let bad = dead(&t, "orders", 1).await;
    // Dead rows are exempt from the headers CHECK (migration 6 dead-letters
    // the rows it refuses); back in pending this one would violate it.
    t.exec(&format!(
        "UPDATE {{schema}}.messages SET headers = '{{\"source\": \"crm\"}}' WHERE id = {bad}"
    ))
    .await;
    let (ok_, out, err) = common::run(&mut common::outbox(t.name(), &["dead", "replay", "--all"]));
    assert!(ok_, "{err}");
    assert_eq!(out.trim(), "replayed=1");
    assert!(err.contains("skipped=1"), "{err}");
    let err = fails(&t, &["dead", "replay", &bad.to_string()]);
    assert!(
        err.contains(&format!(
            "message {bad} has headers or a created_at the schema refuses"
        )),
        "{err}"
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {bad} AND status = 'dead'"
        ))
        .await,
        1
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE id = {good} AND status = 'pending'"
        ))
        .await,
        1
    );
    // Fixed, it replays.
    t.exec(&format!(
        "UPDATE {{schema}}.messages SET headers = '{{\"origin\": \"crm\"}}' WHERE id = {bad}"
    ))
    .await;
    assert_eq!(
        ok(&t, &["dead", "replay", &bad.to_string()]).trim(),
        "replayed=1"
    );
}

/// Rows PostgreSQL accepts that Rust's usual types cannot hold, and rows in
/// states the relay never writes: `dead list`, `--json` and `dead show`
/// print each, bounded.
#[tokio::test]
async fn hostile_dead_rows_are_listed_and_shown_bounded() {
    let t = TestSchema::new("cli_dead_hostile").await;
    // Some of these states migration 10 refuses: rows written before it.
    t.exec("ALTER TABLE {schema}.messages DROP CONSTRAINT messages_state_valid")
        .await;
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let big = "t".repeat(1 << 20);
    let client = t.pool.get().await.unwrap();
    let insert = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           status, attempts, next_run_at, dead_at, dead_reason, created_at) \
         VALUES ('e', 'a', '1', $1, $2::text::jsonb, $3, 1, $4::text::timestamptz, \
                 $5::text::timestamptz, 'r', $6::text::timestamptz) RETURNING id",
        t.schema.quoted()
    );
    let mut ids = Vec::new();
    for (topic, payload, status, next, dead_at, created) in [
        ("deep", deep.as_str(), "dead", "now", Some("now"), "now"),
        (
            "huge_number",
            r#"{"n": 1e400}"#,
            "dead",
            "now",
            Some("now"),
            "now",
        ),
        (
            "infinite",
            "{}",
            "dead",
            "infinity",
            Some("infinity"),
            "-infinity",
        ),
        (
            "far",
            "{}",
            "dead",
            "now",
            Some("294000-01-01"),
            "294000-01-01",
        ),
        (
            "pending_with_dead_at",
            "{}",
            "pending",
            "now",
            Some("now"),
            "now",
        ),
        ("dead_without_dead_at", "{}", "dead", "now", None, "now"),
        (big.as_str(), "{}", "dead", "now", Some("now"), "now"),
    ] {
        let id: i64 = client
            .query_one(
                &insert,
                &[&topic, &payload, &status, &next, &dead_at, &created],
            )
            .await
            .unwrap()
            .get(0);
        ids.push(id);
    }

    let text = ok(&t, &["dead", "list"]);
    for want in [
        "deep",
        "huge_number",
        "infinite",
        "infinity",
        "year 294000",
        "pending_with_dead_at",
        "dead_without_dead_at",
        "bytes cut]",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(text.len() < 16 * 1024, "{} bytes", text.len());

    let json = ok(&t, &["dead", "list", "--json"]);
    assert!(json.len() < 64 * 1024, "{} bytes", json.len());
    // Valid JSON, though serde_json::Value cannot parse it all (nesting
    // past 128 levels): checked element by element as raw values.
    let rows: Vec<Box<serde_json::value::RawValue>> = serde_json::from_str(&json).unwrap();
    assert_eq!(rows.len(), ids.len());
    assert!(rows[0].get().contains(&"[".repeat(200)), "{}", rows[0]);
    assert!(rows[0].get().contains(&format!("\"id\": {}", ids[0])));
    let v: Vec<serde_json::Value> = rows[2..]
        .iter()
        .map(|r| serde_json::from_str(r.get()).unwrap())
        .collect();
    let listed: Vec<i64> = v.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(listed, ids[2..]);
    // The payload is embedded as raw JSON: 1e400 as jsonb keeps it.
    assert!(
        json.contains(&format!("{{\"n\": 1{}}}", "0".repeat(400))),
        "{json}"
    );
    assert_eq!(v[0]["dead_at"], "infinity");
    assert_eq!(v[0]["created_at"], "-infinity");

    for id in &ids {
        let out = ok(&t, &["dead", "show", &id.to_string()]);
        assert!(out.len() < 64 * 1024, "{} bytes", out.len());
        let json = ok(&t, &["dead", "show", &id.to_string(), "--json"]);
        let _: Box<serde_json::value::RawValue> = serde_json::from_str(&json).unwrap();
    }
    let deep_shown = ok(&t, &["dead", "show", &ids[0].to_string()]);
    assert!(deep_shown.contains(&"[".repeat(200)), "{deep_shown}");
}

/// A row no type here can read (a NULL in `event_version`, after an
/// operator dropped its NOT NULL) fails alone: the others are listed, and
/// it is named with its column, in the list and on stderr.
#[tokio::test]
async fn a_row_that_cannot_be_read_is_named_and_the_others_listed() {
    let t = TestSchema::new("cli_dead_unreadable").await;
    let a = dead(&t, "orders", 1).await;
    let bad = dead(&t, "orders", 1).await;
    let b = dead(&t, "orders", 1).await;
    t.exec(&format!(
        "ALTER TABLE {{schema}}.messages ALTER COLUMN event_version DROP NOT NULL; \
         UPDATE {{schema}}.messages SET event_version = NULL WHERE id = {bad}"
    ))
    .await;
    let (ok, out, err) = common::run(&mut common::outbox(t.name(), &["dead", "list"]));
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("{bad}  could not be read: column event_version")),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "message {bad} could not be read (column event_version"
        )),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok_json(&t)).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows[0]["id"].as_i64(), Some(a));
    assert_eq!(rows[1]["id"].as_i64(), Some(bad));
    assert_eq!(rows[1]["unreadable"]["column"], "event_version");
    assert_eq!(rows[2]["id"].as_i64(), Some(b));
    assert_eq!(rows[2]["topic"], "orders");
}

fn ok_json(t: &TestSchema) -> String {
    ok(t, &["dead", "list", "--json"])
}
