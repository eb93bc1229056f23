//! Hostile input through the real binary: what a producer or receiver wrote
//! reaches the operator's terminal as text, and a publisher URL that cannot
//! work stops the relay before it claims anything.

mod common;

use common::{fails, ok, pending};
use outbox_testkit::TestSchema;

/// Window title, screen clear, carriage return, 8-bit CSI, DEL, bidi override.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}31m\u{7f}\u{202e}";

fn assert_inert(out: &str) {
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{9b}', '\u{7f}', '\u{202e}'] {
        assert!(!out.contains(bad), "raw {bad:?} in output:\n{out:?}");
    }
}

#[tokio::test]
async fn dead_letters_print_escape_sequences_as_text() {
    let t = TestSchema::new("cli_dead_escapes").await;
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {}.messages (event_type, aggregate_type, aggregate_id, topic, payload, \
           headers, status, attempts, last_error, dead_at, dead_reason) \
         VALUES ($1, $1, $1, $1, jsonb_build_object('k', $1::text), jsonb_build_object($1::text, $1::text), \
           'dead', 3, $1, now(), $1) RETURNING id",
        t.schema.quoted()
    );
    let id: i64 = client.query_one(&sql, &[&HOSTILE]).await.unwrap().get(0);
    let id = id.to_string();
    let list = ok(&t, &["dead", "list"]);
    assert_inert(&list);
    assert!(list.contains("\\u001b]0;pwned\\u0007"), "{list}");
    let show = ok(&t, &["dead", "show", &id]);
    assert_inert(&show);
    assert!(show.contains("pwned"), "{show}");
    for args in [
        &["dead", "list", "--json"][..],
        &["dead", "show", &id, "--json"],
    ] {
        let json = ok(&t, args);
        assert_inert(&json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let text = v.to_string();
        // The value survives: the JSON means the same strings.
        assert!(text.contains("\\u001b]0;pwned\\u0007"), "{text}");
        assert!(
            serde_json::to_string(&v).unwrap().contains('\u{9b}'),
            "{text}"
        );
    }
    for args in [&["stats"][..], &["stats", "--json"]] {
        assert_inert(&ok(&t, args));
    }
}

#[tokio::test]
async fn a_webhook_url_without_a_host_stops_the_relay_before_any_claim() {
    let t = TestSchema::new("cli_http_no_host").await;
    let ids = [pending(&t).await, pending(&t).await];
    for url in [
        "http://",
        "https://",
        "http://:8080/hook",
        "http://h:99999/",
    ] {
        let err = fails(&t, &["relay", "--once", "--publisher", url]);
        assert!(err.contains("webhook URL"), "{url}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{url}: {err}");
    }
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT count(*) FROM {}.all_messages WHERE id = ANY($1) AND status = 'pending' AND attempts = 0",
        t.schema.quoted()
    );
    let n: i64 = client.query_one(&sql, &[&&ids[..]]).await.unwrap().get(0);
    assert_eq!(n, 2);
}
