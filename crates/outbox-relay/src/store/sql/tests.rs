//! Every statement, rendered for one schema, against `rendered.txt`: the
//! text each one had when the statements were Rust string literals. The
//! comparison is token by token (comments dropped, whitespace between
//! tokens ignored), so moving a statement to a file, laying it out on
//! several lines and commenting it passes, and changing what the server
//! parses fails.
//!
//! After an intended change to a statement, regenerate the file and review
//! its diff: `OUTBOX_BLESS_SQL=1 cargo test -p outbox-relay --lib rendered`
//! (the postgres publisher's sink statements have their own file, checked
//! the same way).

use super::*;
use outbox::Schema;

/// The schema every statement is rendered for.
pub(crate) const SCHEMA: &str = "snap_schema";

/// Every statement with its name.
fn statements(q: &Queries) -> Vec<(String, &str)> {
    let mut all = q.named();
    all.push(("sql_ascii_raw".into(), SQL_ASCII_RAW));
    all
}

/// `text`'s tokens as PostgreSQL's lexer splits them, comments dropped:
/// words (keywords, names, numbers, `$1`), quoted strings and names whole,
/// runs of operator characters, and single punctuation.
fn tokens(text: &str) -> Vec<String> {
    const OPERATOR: &str = "+-*/<>=~!@#%^&|`?:";
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '\'' || c == '"' {
            // A doubled quote is one quote inside the token.
            i += 1;
            loop {
                match chars.get(i) {
                    None => break,
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => i += 2,
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            while i < chars.len() && (chars[i].is_alphanumeric() || "_$".contains(chars[i])) {
                i += 1;
            }
        } else if OPERATOR.contains(c) {
            while i < chars.len()
                && OPERATOR.contains(chars[i])
                && !(chars[i] == '-' && chars.get(i + 1) == Some(&'-'))
            {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push(chars[start..i].iter().collect());
    }
    out
}

/// The tokens of `text` on one line, a space between two unless one of
/// them is `.`, `::` or a bracket that reads better without (it lexes back
/// to the same tokens).
fn normalized(text: &str) -> String {
    let mut out = String::new();
    let mut prev = "";
    for t in &tokens(text) {
        let tight = matches!(prev, "(" | "[" | "." | "::" | "")
            || matches!(t.as_str(), ")" | "]" | "," | "." | "::" | "[");
        if !tight {
            out.push(' ');
        }
        out.push_str(t);
        prev = t;
    }
    out
}

/// A snapshot file: `name<TAB>text` per statement, `#` lines are comments.
fn parse(snapshot: &str) -> Vec<(String, String)> {
    snapshot
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, text) = l.split_once('\t').expect("name<TAB>text");
            (name.to_owned(), text.to_owned())
        })
        .collect()
}

/// Checks `now`, every statement of a set rendered for [`SCHEMA`], against
/// `snapshot`, the text of the file at `path` (from the crate's root);
/// with `OUTBOX_BLESS_SQL` set, writes `now` to that file instead.
pub(crate) fn check_snapshot(snapshot: &str, path: &str, now: &[(String, &str)]) {
    if std::env::var_os("OUTBOX_BLESS_SQL").is_some() {
        let mut file = format!(
            "# Every statement rendered for schema {SCHEMA}, one per line (name, a tab,\n\
             # its tokens): see src/store/sql/tests.rs.\n"
        );
        for (name, text) in now {
            file.push_str(&format!("{name}\t{}\n", normalized(text)));
        }
        std::fs::write(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")), file).unwrap();
        return;
    }
    let before = parse(snapshot);
    let names_now: Vec<&str> = now.iter().map(|s| s.0.as_str()).collect();
    let names_before: Vec<&str> = before.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names_now, names_before, "the same statements as {path}");
    for ((name, text), (_, old)) in now.iter().zip(&before) {
        assert_eq!(
            normalized(text),
            normalized(old),
            "{name} differs from {path}"
        );
        assert_eq!(tokens(text), tokens(old), "{name}");
    }
}

#[test]
fn statements_are_as_rendered() {
    let q = Queries::new(&Schema::new(SCHEMA).unwrap());
    check_snapshot(
        include_str!("rendered.txt"),
        "src/store/sql/rendered.txt",
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

#[test]
fn tokens_split_as_the_server_reads() {
    assert_eq!(
        tokens("SELECT a.b,count(*)::int8 -- why\n FROM \"x\"\"y\".t WHERE c <= $1 AND d = 'it''s -- no'"),
        [
            "SELECT", "a", ".", "b", ",", "count", "(", "*", ")", "::", "int8", "FROM", "\"x\"\"y\"",
            ".", "t", "WHERE", "c", "<=", "$1", "AND", "d", "=", "'it''s -- no'"
        ]
    );
    assert_ne!(tokens("a <= b"), tokens("a < = b"));
    assert_eq!(tokens("f( x )"), tokens("f(x)"));
    let sql = "SELECT a.b, f(x)::int8[] FROM t WHERE c <= $1";
    assert_eq!(
        normalized(sql),
        "SELECT a.b, f (x)::int8[] FROM t WHERE c <= $1"
    );
    assert_eq!(tokens(&normalized(sql)), tokens(sql));
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
