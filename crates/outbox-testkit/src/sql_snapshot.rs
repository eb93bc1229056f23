//! Statements compared with a snapshot of their rendered text, token by
//! token: comments dropped, whitespace between tokens ignored. A crate's
//! statements move from Rust literals to `.sql` files (laid out on several
//! lines and commented) without a change the server would parse; a change
//! to what it parses fails, until the snapshot is regenerated with
//! `OUTBOX_BLESS_SQL=1` and its diff reviewed.

/// The schema the statements of a snapshot are rendered for.
pub const SCHEMA: &str = "snap_schema";

/// `text`'s tokens as PostgreSQL's lexer splits them, comments dropped:
/// words (keywords, names, numbers, `$1`), quoted strings and names whole,
/// runs of operator characters, and single punctuation.
pub fn tokens(text: &str) -> Vec<String> {
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
pub fn normalized(text: &str) -> String {
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

/// Checks `now`, every statement of a set rendered for [`SCHEMA`] with its
/// name, against the snapshot file at `path` (`name<TAB>tokens` per line);
/// with `OUTBOX_BLESS_SQL` set, writes `now` to that file instead.
pub fn check_snapshot(path: &str, now: &[(String, &str)]) {
    if std::env::var_os("OUTBOX_BLESS_SQL").is_some() {
        let mut file = format!(
            "# Every statement rendered for schema {SCHEMA}, one per line (name, a tab,\n\
             # its tokens): see outbox-testkit's sql_snapshot.rs.\n"
        );
        for (name, text) in now {
            file.push_str(&format!("{name}\t{}\n", normalized(text)));
        }
        std::fs::write(path, file).unwrap();
        return;
    }
    let snapshot = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let before = parse(&snapshot);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
