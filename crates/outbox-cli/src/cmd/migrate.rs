use outbox::sql::{latest_version, MIGRATIONS};
use outbox::Schema;
use outbox_relay::{Admin, Store};

/// `outbox migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the SQL instead of running it (for `psql -f` or a DBA's review).
    #[arg(long)]
    print: bool,
    /// Say which migrations would be applied, and change nothing.
    #[arg(long, conflicts_with = "print")]
    dry_run: bool,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    if args.print {
        print!("BEGIN;\n{}COMMIT;\n", outbox::sql::migrate_script(&schema));
        return Ok(());
    }
    let pool = crate::db::connect(&crate::db::require_url(url)?, 1).await?;
    if args.dry_run {
        let admin = Admin::new(Store::new(pool.clone(), schema.clone()));
        let before = admin.recorded_migrations().await?.unwrap_or_default();
        println!("schema {schema}: {}", would_apply(&before));
        return Ok(());
    }
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // Every statement here is unnamed (`query_typed`, simple queries), as
    // in the relay's store, so that migrate runs through a transaction-mode
    // pooler; its advisory lock is a transaction's (`pg_advisory_xact_lock`).
    // What the script did is read off the records, before and after, in its
    // own transaction under its lock: read before the lock, four migrates
    // started together would each find nothing recorded and each claim
    // every migration the first one applied.
    let waited = !tx
        .query_typed_one(&outbox::sql::try_lock_statement(&schema), &[])
        .await?
        .try_get::<_, bool>("locked")?;
    if waited {
        eprintln!("schema {schema}: waiting for another outbox migrate to finish");
        tx.batch_execute(&outbox::sql::lock_statement(&schema))
            .await?;
    }
    let before = recorded(&tx, &schema).await?;
    outbox::migrate(&*tx, &schema).await?;
    let after = recorded(&tx, &schema).await?;
    tx.commit().await?;
    let mut said = describe(&before, &after);
    if waited && before == after {
        said.push_str(" after waiting for another migrate");
    }
    println!("schema {schema}: {said}");
    Ok(())
}

/// The versions recorded in `schema`, none without its table, read in the
/// migration's transaction.
async fn recorded(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &Schema,
) -> anyhow::Result<Vec<i32>> {
    let exists: bool = tx
        .query_typed_one(&outbox::sql::recorded_exists_statement(schema), &[])
        .await?
        .try_get("exists")?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(tx
        .query_typed_one(&outbox::sql::recorded_statement(schema), &[])
        .await?
        .try_get("versions")?)
}

/// `applied 0003_notify, 0004_sink_headers`, or `up to date (migration 5)`
/// when nothing was recorded. A migration recorded below one that already
/// was had lost its record (or never ran): it is named as re-applied.
fn describe(before: &[i32], after: &[i32]) -> String {
    let newest_before = before.iter().copied().max().unwrap_or(0);
    let (mut applied, mut reapplied) = (Vec::new(), Vec::new());
    for m in MIGRATIONS {
        if after.contains(&m.version) && !before.contains(&m.version) {
            if m.version < newest_before {
                reapplied.push(m.label());
            } else {
                applied.push(m.label());
            }
        }
    }
    let mut parts = Vec::new();
    if !reapplied.is_empty() {
        parts.push(format!(
            "re-applied {} (not recorded)",
            reapplied.join(", ")
        ));
    }
    if !applied.is_empty() {
        parts.push(format!("applied {}", applied.join(", ")));
    }
    if parts.is_empty() {
        format!("up to date (migration {})", latest_version())
    } else {
        parts.join("; ")
    }
}

/// `would apply 0006_…, 0007_…` for the migrations not recorded, or
/// `up to date (migration 7)`.
fn would_apply(recorded: &[i32]) -> String {
    let missing: Vec<String> = MIGRATIONS
        .iter()
        .filter(|m| !recorded.contains(&m.version))
        .map(|m| m.label())
        .collect();
    if missing.is_empty() {
        format!("up to date (migration {})", latest_version())
    } else {
        format!("would apply {}", missing.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_names_what_is_not_recorded() {
        let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(
            would_apply(&all),
            format!("up to date (migration {})", latest_version())
        );
        let first_two = &all[..2];
        let rest: Vec<String> = MIGRATIONS[2..].iter().map(|m| m.label()).collect();
        assert_eq!(
            would_apply(first_two),
            format!("would apply {}", rest.join(", "))
        );
    }

    #[test]
    fn names_what_was_recorded() {
        let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        let latest = latest_version();
        assert_eq!(
            describe(&all, &all),
            format!("up to date (migration {latest})")
        );
        assert_eq!(
            describe(&[1, 2], &[1, 2, 3, 4]),
            "applied 0003_notify, 0004_sink_headers"
        );
        assert_eq!(
            describe(&[1, 3, 4], &[1, 2, 3, 4, 5]),
            "re-applied 0002_archive_dead_replays (not recorded); applied 0005_hot_claims"
        );
    }
}
