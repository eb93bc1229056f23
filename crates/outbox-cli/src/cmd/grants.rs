use anyhow::Context;
use outbox::Schema;

/// `outbox grants`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The role applications enqueue (and consumers record processed events) as.
    #[arg(long)]
    producer: String,
    /// The role `outbox relay` connects as.
    #[arg(long)]
    relay: String,
    /// Run the statements instead of printing them (needs a role allowed to grant).
    #[arg(long)]
    apply: bool,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let sql = outbox::sql::grants(&schema, &args.producer, &args.relay)?;
    if !args.apply {
        print!("{sql}");
        return Ok(());
    }
    let pool = crate::db::connect(&crate::db::require_url(url)?, 1).await?;
    let client = pool.get().await?;
    // One implicit transaction: all the grants, or none.
    client
        .batch_execute(&sql)
        .await
        .context("granting failed, nothing granted")?;
    println!(
        "granted: producer {} and relay {} on schema {schema}",
        args.producer, args.relay
    );
    Ok(())
}
