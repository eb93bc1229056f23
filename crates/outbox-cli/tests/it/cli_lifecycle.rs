//! A message's whole operational life through the binary: the sink rejects
//! it (dead), an operator replays it, the relay sends it, the archive takes
//! it out of the live tables.

use crate::common;

use common::ok;
use outbox_testkit::TestSchema;

#[tokio::test]
async fn dead_then_replayed_then_sent_then_archived() {
    let t = TestSchema::new("cli_lifecycle").await;
    // The sink refuses topic 'poison' with a permanent error.
    t.sink_rejects("poison", "check_violation", "poison refused")
        .await;
    t.exec(
        "INSERT INTO {schema}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('e', 'a', '1', 'good', '{}'), ('e', 'a', '2', 'poison', '{}');",
    )
    .await;
    assert_eq!(
        ok(&t, &["relay", "--once"]),
        "claimed=2 published=1 marked_sent=1 failed=1\n"
    );
    let list: serde_json::Value =
        serde_json::from_str(&ok(&t, &["dead", "list", "--json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let id = list[0]["id"].as_i64().unwrap();
    assert!(
        list[0]["dead_reason"]
            .as_str()
            .unwrap()
            .contains("poison refused"),
        "{list}"
    );

    // The sink is fixed; the operator replays the message.
    t.exec("DROP TRIGGER reject_poison ON {schema}.published_events")
        .await;
    assert_eq!(
        ok(&t, &["dead", "replay", &id.to_string(), "--by", "oncall"]),
        "replayed=1\n"
    );
    assert_eq!(
        ok(&t, &["relay", "--once"]),
        "claimed=1 published=1 marked_sent=1 failed=0\n"
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.dead_replays WHERE message_id = {id} \
               AND dead_reason LIKE '%poison refused%' AND replayed_by = 'oncall'"
        ))
        .await,
        1
    );

    // Both are sent; archiving everything sent so far empties the view.
    assert_eq!(ok(&t, &["archive", "--older-than", "0"]), "archived=2\n");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.all_messages").await,
        0
    );
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM {{schema}}.archived_messages WHERE id = {id} AND status = 'sent'"
        ))
        .await,
        1
    );
}
