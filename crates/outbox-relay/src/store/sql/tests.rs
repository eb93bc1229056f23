//! Every statement, rendered for one schema, against `rendered.txt`: the
//! text each one had when the statements were Rust string literals. The
//! comparison is token by token (`outbox_testkit::sql_snapshot`: comments
//! dropped, whitespace between tokens ignored), so moving a statement to a
//! file, laying it out on several lines and commenting it passes, and
//! changing what the server parses fails.
//!
//! After an intended change to a statement, regenerate the file and review
//! its diff: `OUTBOX_BLESS_SQL=1 cargo test -p outbox-relay --lib rendered`
//! (the postgres publisher's sink statements have their own file, checked
//! the same way).

use super::*;
use outbox::Schema;
use outbox_testkit::sql_snapshot::{check_snapshot, normalized, SCHEMA};

/// Every statement with its name.
fn statements(q: &Queries) -> Vec<(String, &str)> {
    let mut all = q.named();
    all.push(("sql_ascii_raw".into(), SQL_ASCII_RAW));
    all
}

#[test]
fn statements_are_as_rendered() {
    let q = Queries::new(&Schema::new(SCHEMA).unwrap());
    check_snapshot(
        concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/sql/rendered.txt"),
        &statements(&q),
    );
}

/// What the server receives is the statement: its file's header is left
/// out, and every placeholder is filled.
#[test]
fn a_rendered_statement_starts_with_its_sql() {
    let q = Queries::new(&Schema::new(SCHEMA).unwrap());
    for (name, text) in q.named() {
        assert!(!text.starts_with("--"), "{name}: {text}");
        assert!(
            !text.contains("{schema}") && !text.contains("{channel}"),
            "{name}"
        );
    }
    assert!(q.claim.starts_with("WITH c AS ("), "{}", q.claim);
}

/// `text` from the first `from` to the first `to` after it, both included.
fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("{from:?} in {text}"));
    let len = text[start..]
        .find(to)
        .unwrap_or_else(|| panic!("{to:?} in {text}"))
        + to.len();
    &text[start..start + len]
}

/// The three claims are written out in full, one file each: what they
/// share (the lock, the size and the budget, the update, the columns, the
/// snapshot; the registration check of the ordered two) must stay the same.
#[test]
fn the_claims_share_their_common_parts_word_for_word() {
    let q = Queries::new(&Schema::new(SCHEMA).unwrap());
    let claim = normalized(&q.claim);
    let ordered = normalized(&q.claim_ordered);
    let filtered = normalized(&q.claim_ordered_filtered);
    let shared = [
        between(&claim, "c AS (SELECT id,", "AND dead_at IS NULL"),
        between(
            &claim,
            "ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)",
            "AS snap)",
        ),
        between(
            &claim,
            "UPDATE \"snap_schema\".messages m",
            "AS payload_bytes",
        ),
        between(&claim, "pg_snapshot_xmin", "AS snapshot_xmax"),
    ];
    for part in shared {
        assert!(ordered.contains(part), "claim_ordered lacks {part}");
        assert!(
            filtered.contains(part),
            "claim_ordered_filtered lacks {part}"
        );
    }
    let registered = [
        between(&ordered, "a AS (", "FOR SHARE)"),
        "AND dead_at IS NULL AND EXISTS (SELECT 1 FROM a)",
        between(
            &ordered,
            "\"snap_schema\".aggregate_key",
            "AS aggregate_key",
        ),
    ];
    for part in registered {
        assert!(ordered.contains(part), "claim_ordered lacks {part}");
        assert!(
            filtered.contains(part),
            "claim_ordered_filtered lacks {part}"
        );
    }
}

/// Over the draft migration 12's schema the claim path reads `retries`,
/// and only where a statement names today's table: `messages_sent` and the
/// lanes' reads of the new `messages` stay as they are.
#[test]
fn the_claim_path_reads_retries_where_it_named_messages() {
    let schema = Schema::new(SCHEMA).unwrap();
    let (plain, retries) = (Queries::new(&schema), Queries::with_retries(&schema));
    let q = schema.quoted();
    assert!(plain.claim.contains(&format!("{q}.messages ")));
    assert!(!retries.claim.contains(&format!("{q}.messages ")));
    assert!(retries.claim.contains(&format!("{q}.retries ")));
    assert!(retries.settle.contains(&format!("{q}.messages_sent")));
    assert_eq!(retries.lane.batch, plain.lane.batch);
    assert_eq!(
        super::rename_table(
            "a.messages, a.messages_sent, a.messages\n",
            "a.messages",
            "a.retries"
        ),
        "a.retries, a.messages_sent, a.retries\n"
    );
}
