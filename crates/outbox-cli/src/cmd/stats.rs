use anyhow::bail;
use outbox::Schema;
use outbox_cli::terminal::printable_json;
use outbox_relay::admin::{cut, TopicCounts};
use outbox_relay::{Admin, Store};
use std::collections::BTreeMap;
use std::time::Duration;

/// `outbox stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Exit non-zero (after printing) when the oldest pending message is
    /// older than this, e.g. 5m: for cron-style alerting.
    #[arg(long, value_parser = super::parse_duration, value_name = "DURATION")]
    fail_if_oldest_pending_over: Option<Duration>,
}

/// What one topic name may print, in bytes (cut with a marker past it):
/// a producer chooses its size, and `stats` prints one line per topic.
const TOPIC: usize = 256;

/// Statuses of the live tables, in the order they are printed.
const LIVE: [&str; 5] = ["pending", "processing", "failed", "dead", "sent"];
/// Archived rows, by the status they were archived with.
const ARCHIVED: [(&str, &str); 2] = [("sent", "archived_sent"), ("dead", "archived_dead")];

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let pool = crate::db::connect(&crate::db::require_url(url)?, 1).await?;
    let admin = Admin::new(Store::new(pool, schema));
    admin.check_migrated().await?;
    let topic = args.topic.as_deref();
    let by_topic = admin.count_by_topic(topic).await?;
    let oldest = admin.oldest_waiting_age(topic).await?;
    let mut totals = TopicCounts::new();
    for counts in by_topic.values() {
        for (status, n) in counts {
            *totals.entry(status.clone()).or_default() += n;
        }
    }
    let get = |c: &TopicCounts, k: &str| c.get(k).copied().unwrap_or(0);
    let live =
        |c: &TopicCounts| -> BTreeMap<&str, i64> { LIVE.iter().map(|s| (*s, get(c, s))).collect() };
    let archived = |c: &TopicCounts| -> BTreeMap<&str, i64> {
        ARCHIVED.iter().map(|(s, k)| (*s, get(c, k))).collect()
    };
    let oldest_secs = oldest.map(|d| d.as_secs_f64());
    if args.json {
        let topics: BTreeMap<String, serde_json::Value> = by_topic
            .iter()
            .map(|(t, c)| {
                let v = serde_json::json!({ "counts": live(c), "archived": archived(c) });
                (cut(t, TOPIC).into_owned(), v)
            })
            .collect();
        let v = serde_json::json!({
            "schema": admin.schema().name(),
            "topic": topic.map(|t| cut(t, TOPIC)),
            "counts": live(&totals),
            "archived": archived(&totals),
            "dead": get(&totals, "dead"),
            "oldest_pending_age_seconds": oldest_secs,
            "topics": topics,
        });
        println!("{}", printable_json(&v.to_string()));
    } else {
        for (status, n) in live(&totals) {
            println!("{status}={n}");
        }
        for (status, n) in archived(&totals) {
            println!("archived_{status}={n}");
        }
        match oldest_secs {
            Some(s) => println!("oldest_pending_age_seconds={s:.3}"),
            None => println!("oldest_pending_age_seconds=none"),
        }
        for (t, c) in &by_topic {
            let cells: Vec<String> = LIVE
                .iter()
                .map(|s| format!("{s}={}", get(c, s)))
                .chain(ARCHIVED.iter().map(|(_, k)| format!("{k}={}", get(c, k))))
                .collect();
            // Debug formatting escapes control characters, as printable does.
            println!("topic {:?}: {}", cut(t, TOPIC), cells.join(" "));
        }
    }
    if let (Some(limit), Some(age)) = (args.fail_if_oldest_pending_over, oldest) {
        if age > limit {
            bail!(
                "oldest pending message is {} old, over the limit of {}",
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(limit)
            );
        }
    }
    Ok(())
}
