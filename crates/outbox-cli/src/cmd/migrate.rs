use outbox::Schema;

/// `outbox migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the SQL instead of running it (for `psql -f` or a DBA's review).
    #[arg(long)]
    print: bool,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    if args.print {
        print!("BEGIN;\n{}COMMIT;\n", outbox::sql::migrate_script(&schema));
        return Ok(());
    }
    let pool = crate::db::connect(&crate::db::require_url(url)?, 1).await?;
    let client = pool.get().await?;
    outbox::migrate(&**client, &schema).await?;
    println!("schema {schema} is up to date");
    Ok(())
}
