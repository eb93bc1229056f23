use outbox::Schema;
use outbox_relay::Store;

/// `outbox stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let pool = crate::db::connect(&crate::db::require_url(url)?, 1).await?;
    let store = Store::new(pool, schema);
    store.check_migrated().await?;
    let counts = store.count_messages_by_status().await?;
    let oldest = store.oldest_pending_age().await?.map(|d| d.as_secs_f64());
    if args.json {
        let v = serde_json::json!({
            "schema": store.schema().name(),
            "counts": counts,
            "oldest_pending_age_seconds": oldest,
            "dead": counts.get("dead").copied().unwrap_or(0),
        });
        println!("{v}");
    } else {
        for (status, n) in &counts {
            println!("{status}={n}");
        }
        match oldest {
            Some(s) => println!("oldest_pending_age_seconds={s:.3}"),
            None => println!("oldest_pending_age_seconds=none"),
        }
    }
    Ok(())
}
