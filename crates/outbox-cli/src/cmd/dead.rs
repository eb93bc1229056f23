use super::parse_duration;
use anyhow::anyhow;
use outbox::Schema;
use outbox_cli::terminal::{printable, printable_json};
use outbox_relay::store::DeadMessage;
use outbox_relay::{DeadLetters, Error, ReplayTarget, Store};
use std::time::Duration;

/// `outbox dead`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Dead messages in id order.
    List {
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Every field of one dead message.
    Show {
        /// Message id.
        id: i64,
        /// Print a JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Send dead messages back to pending (attempts 0, due now), recording
    /// each replay in dead_replays. Given ids, all must be dead or nothing
    /// is replayed.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "all", "topic"])))]
    Replay {
        /// Message ids.
        ids: Vec<i64>,
        /// Every dead message.
        #[arg(long)]
        all: bool,
        /// Every dead message on this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Who replays, recorded with each replay [default: $USER, else the database user].
        #[arg(long)]
        by: Option<String>,
    },
    /// Delete dead messages that went dead longer ago than --older-than.
    Purge {
        /// e.g. 30d, 12h.
        #[arg(long, value_parser = parse_duration)]
        older_than: Duration,
    },
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let pool = crate::db::connect(&crate::db::require_url(url)?, 2).await?;
    let store = Store::new(pool, schema);
    store.check_migrated().await?;
    let dead = DeadLetters::new(store);
    match args.action {
        Action::List { topic, limit, json } => {
            let list = dead.list(topic.as_deref(), limit).await?;
            if json {
                // serde leaves DEL and C1 controls raw; printable_json escapes them
                // the JSON way, so the document still parses to the same value.
                println!("{}", printable_json(&serde_json::to_string_pretty(&list)?));
            } else {
                print_table(&list);
            }
        }
        Action::Show { id, json } => {
            let m = dead.show(id).await?;
            if json {
                println!("{}", printable_json(&serde_json::to_string_pretty(&m)?));
            } else {
                print_message(&m)?;
            }
        }
        Action::Replay {
            ids,
            all,
            topic,
            by,
        } => {
            let target = match (all, topic) {
                (true, _) => ReplayTarget::All,
                (false, Some(t)) => ReplayTarget::Topic(t),
                (false, None) => ReplayTarget::Ids(ids),
            };
            let by = by.or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()));
            let replayed = dead
                .replay(&target, by.as_deref())
                .await
                .map_err(|e| match e {
                    Error::NotDead(_) => anyhow!("nothing was replayed: {e}"),
                    other => other.into(),
                })?;
            println!("replayed={}", replayed.len());
            if !matches!(target, ReplayTarget::Ids(_)) {
                let skipped = dead.unreplayable(&target).await?;
                if skipped > 0 {
                    eprintln!(
                        "skipped={skipped}: dead messages whose headers the schema refuses \
                         (an object of strings, no reserved name); fix their headers, then replay"
                    );
                }
            }
        }
        Action::Purge { older_than } => {
            println!("purged={}", dead.purge(older_than).await?);
        }
    }
    Ok(())
}

fn print_table(list: &[DeadMessage]) {
    if list.is_empty() {
        println!("no dead messages");
        return;
    }
    println!(
        "{:>10}  {:<24}  {:<24}  {:>8}  {:<20}  reason",
        "id", "topic", "event_type", "attempts", "dead_at"
    );
    for m in list {
        let reason = m.dead_reason.as_deref().unwrap_or("").replace('\n', " ");
        let reason = printable(&reason.chars().take(80).collect::<String>());
        println!(
            "{:>10}  {:<24}  {:<24}  {:>8}  {:<20}  {reason}",
            m.id,
            printable(&m.topic),
            printable(&m.event_type),
            m.attempts,
            m.dead_at
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default(),
        );
    }
}

fn print_message(m: &DeadMessage) -> anyhow::Result<()> {
    let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "-".into(), printable);
    println!("id: {}", m.id);
    println!("event_id: {}", m.event_id);
    println!("event_type: {}", printable(&m.event_type));
    println!("event_version: {}", m.event_version);
    println!("aggregate_type: {}", printable(&m.aggregate_type));
    println!("aggregate_id: {}", printable(&m.aggregate_id));
    println!("topic: {}", printable(&m.topic));
    println!("status: {}", printable(&m.status));
    println!("attempts: {}", m.attempts);
    println!("created_at: {}", m.created_at.to_rfc3339());
    println!("next_run_at: {}", m.next_run_at.to_rfc3339());
    println!(
        "dead_at: {}",
        m.dead_at.map_or_else(|| "-".into(), |t| t.to_rfc3339())
    );
    println!("dead_reason: {}", opt(&m.dead_reason));
    println!("last_error: {}", opt(&m.last_error));
    println!(
        "headers: {}",
        printable_json(&serde_json::to_string(&m.headers)?)
    );
    println!(
        "payload: {}",
        printable_json(&serde_json::to_string_pretty(&m.payload)?)
    );
    Ok(())
}
