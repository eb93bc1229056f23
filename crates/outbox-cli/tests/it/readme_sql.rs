//! The README's SQL, run as written: each `sql` block, and the statements
//! of the Rust snippets in README order, on a fresh database after
//! `outbox migrate`. (The shell commands are `readme.rs`'s; the Rust
//! snippets compile in `crates/outbox-readme`.)

use crate::common;

use common::run;

fn readme() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join("README.md")).unwrap()
}

/// The contents of every ` ```lang ` block of the README, in order.
fn blocks(readme: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}");
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in readme.lines() {
        match &mut cur {
            None if line.starts_with(&fence) => cur = Some(String::new()),
            Some(b) if line.starts_with("```") => {
                out.push(std::mem::take(b));
                cur = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The SQL string literals of the README's Rust snippets, in order.
fn rust_sql(readme: &str) -> Vec<String> {
    const VERBS: &[&str] = &["CREATE ", "INSERT ", "UPDATE ", "SELECT ", "DELETE "];
    let mut out = Vec::new();
    for block in blocks(readme, "rust") {
        for (i, _) in block.match_indices('"') {
            let rest = &block[i + 1..];
            if VERBS.iter().any(|v| rest.starts_with(v)) {
                out.push(rest[..rest.find('"').unwrap()].to_owned());
            }
        }
    }
    out
}

/// A fresh database migrated by `outbox migrate` (the default schema,
/// `outbox`, as the README's snippets name it), and a client on it.
async fn fresh_migrated(label: &str) -> (outbox_testkit::TestDatabase, tokio_postgres::Client) {
    let db = outbox_testkit::TestDatabase::new(label).await;
    let (ok, out, err) = run(common::bare(&["migrate"]).env("DATABASE_URL", db.url()));
    assert!(ok, "outbox migrate:\n{out}{err}");
    let (client, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    (db, client)
}

/// Each SQL block runs as written on a fresh database after `outbox
/// migrate`, and the plain-SQL enqueue enqueues. The statements of the Rust
/// snippets, in README order on another: those without parameters run,
/// those with are prepared, which checks every table and column they name
/// (the consume example updated a column no snippet created).
#[tokio::test]
async fn every_sql_snippet_runs_on_a_fresh_database() {
    let readme = readme();
    let sql = blocks(&readme, "sql");
    assert!(!sql.is_empty(), "the README shows a plain-SQL enqueue");
    for block in &sql {
        let (_db, client) = fresh_migrated("readme_sql").await;
        client
            .batch_execute(block)
            .await
            .unwrap_or_else(|e| panic!("{block}\nfails on a fresh database: {e:?}"));
        let n: i64 = client
            .query_one("SELECT count(*) FROM outbox.all_messages", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "{block}");
    }
    let statements = rust_sql(&readme);
    assert!(
        statements.iter().any(|s| s.starts_with("UPDATE orders")),
        "{statements:?}"
    );
    let (_db, client) = fresh_migrated("readme_rust_sql").await;
    for s in &statements {
        let done = if s.contains('$') {
            client.prepare(s).await.map(drop)
        } else {
            client.batch_execute(s).await
        };
        done.unwrap_or_else(|e| panic!("{s}\nfails after the snippets before it: {e:?}"));
    }
}
