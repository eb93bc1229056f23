//! `outbox migrate` run by several processes at once: each says what it did.

use crate::common;

use common::{outbox, run};
use outbox::sql::MIGRATIONS;
use outbox_testkit::TestSchema;

/// Four `outbox migrate` on a fresh schema, started together: one applies
/// every migration and says so; the others say the schema is up to date.
/// Before, each read the records before taking the migration lock, and all
/// four said they applied every migration.
#[tokio::test]
async fn concurrent_migrates_each_report_what_they_did() {
    let t = TestSchema::unmigrated("cli_migrate_race").await;
    let children: Vec<_> = (0..4)
        .map(|_| {
            outbox(t.name(), &["migrate"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn outbox migrate")
        })
        .collect();
    let outs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                o.status.success(),
                "{out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            out
        })
        .collect();
    for m in MIGRATIONS {
        let label = m.label();
        let applying = outs.iter().filter(|o| o.contains(&label)).count();
        assert_eq!(applying, 1, "{label} applied by exactly one: {outs:#?}");
    }
    let up_to_date = outs.iter().filter(|o| o.contains("up to date")).count();
    assert_eq!(up_to_date, 3, "{outs:#?}");
    // And a later run says it too.
    let (ok, out, _) = run(&mut outbox(t.name(), &["migrate"]));
    assert!(ok && out.contains("up to date"), "{out}");
    assert_eq!(
        t.count("SELECT count(*) FROM {schema}.schema_migrations")
            .await,
        MIGRATIONS.len() as i64
    );
}
