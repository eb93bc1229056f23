use super::parse_duration;
use anyhow::anyhow;
use outbox::Schema;
use outbox_cli::terminal::{printable, printable_json};
use outbox_relay::admin::{cut, DeadMessage, Timestamp};
use outbox_relay::dead::DeadRow;
use outbox_relay::{Admin, DeadLetters, Error, Payload, ReplayTarget, Store};
use serde::Serialize;
use std::borrow::Cow;
use std::time::Duration;

/// What one value may print, in bytes: a producer chooses the size of every
/// text and payload, so each is cut (with a marker saying how much) and a
/// list of `--limit` rows prints at most about `--limit` times the sum.
/// `dead list`: topic, event type, aggregate, status, reason, last error.
const LIST_TEXT: usize = 256;
/// `dead list --json`: payload and headers (past it, a JSON string holding
/// the cut text instead of the raw JSON).
const LIST_JSON: usize = 4 * 1024;
/// `dead show`: each text value.
const SHOW_TEXT: usize = 16 * 1024;
/// `dead show`: payload and headers.
const SHOW_JSON: usize = 256 * 1024;

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
    Admin::new(store.clone()).check_migrated().await?;
    let dead = DeadLetters::new(store);
    match args.action {
        Action::List { topic, limit, json } => {
            let list = dead.list(topic.as_deref(), limit).await?;
            if json {
                let rows: Vec<ListedRow<'_>> = list.iter().map(ListedRow::of).collect();
                // serde leaves DEL and C1 controls raw; printable_json escapes them
                // the JSON way, so the document still parses to the same value.
                println!("{}", printable_json(&serde_json::to_string_pretty(&rows)?));
            } else {
                print_table(&list);
            }
            for bad in list.iter().filter_map(|r| r.as_ref().err()) {
                eprintln!(
                    "message {} could not be read (column {}: {}); the others are listed",
                    bad.id,
                    bad.column,
                    printable(&cut(&bad.reason, LIST_TEXT))
                );
            }
        }
        Action::Show { id, json } => {
            let m = dead.show(id).await?;
            let shown = Shown::of(&m, SHOW_TEXT, SHOW_JSON);
            if json {
                println!("{}", printable_json(&serde_json::to_string_pretty(&shown)?));
            } else {
                print_message(&shown);
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
                        "skipped={skipped}: dead messages whose headers or created_at the schema \
                         refuses (headers: an object of strings, no reserved name; created_at: a \
                         finite time); fix them, then replay"
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

/// A dead message as printed: every producer-written value cut to a bound.
/// Serialized as [`DeadMessage`] is, the payload and headers as their raw
/// JSON when within the bound.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    id: i64,
    event_id: uuid::Uuid,
    event_type: Cow<'a, str>,
    event_version: i32,
    aggregate_type: Cow<'a, str>,
    aggregate_id: Cow<'a, str>,
    topic: Cow<'a, str>,
    payload: Json<'a>,
    headers: Json<'a>,
    status: Cow<'a, str>,
    attempts: i32,
    next_run_at: Timestamp,
    last_error: Option<Cow<'a, str>>,
    dead_at: Option<Timestamp>,
    dead_reason: Option<Cow<'a, str>>,
    created_at: Timestamp,
}

/// A payload or headers value as printed: the stored JSON, or past the
/// bound a JSON string of its cut text (so `--json` output always parses).
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Json<'a> {
    Raw(&'a Payload),
    Cut(String),
}

impl<'a> Json<'a> {
    fn of(v: &'a Payload, max: usize) -> Self {
        if v.get().len() <= max {
            Self::Raw(v)
        } else {
            Self::Cut(cut(v.get(), max).into_owned())
        }
    }

    fn text(&self) -> Cow<'_, str> {
        match self {
            Self::Raw(p) => p.get().into(),
            Self::Cut(s) => s.as_str().into(),
        }
    }
}

impl<'a> Shown<'a> {
    fn of(m: &'a DeadMessage, text: usize, json: usize) -> Self {
        let c = |s: &'a str| cut(s, text);
        Self {
            id: m.id,
            event_id: m.event_id,
            event_type: c(&m.event_type),
            event_version: m.event_version,
            aggregate_type: c(&m.aggregate_type),
            aggregate_id: c(&m.aggregate_id),
            topic: c(&m.topic),
            payload: Json::of(&m.payload, json),
            headers: Json::of(&m.headers, json),
            status: c(&m.status),
            attempts: m.attempts,
            next_run_at: m.next_run_at,
            last_error: m.last_error.as_deref().map(c),
            dead_at: m.dead_at,
            dead_reason: m.dead_reason.as_deref().map(c),
            created_at: m.created_at,
        }
    }
}

/// One element of `dead list --json`: the message, bounded, or the id of a
/// row that could not be read with the column and the reason.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ListedRow<'a> {
    Message(Box<Shown<'a>>),
    Unreadable {
        id: i64,
        unreadable: &'a outbox_relay::dead::UnreadableRow,
    },
}

impl<'a> ListedRow<'a> {
    fn of(row: &'a DeadRow) -> Self {
        match row {
            Ok(m) => Self::Message(Box::new(Shown::of(m, LIST_TEXT, LIST_JSON))),
            Err(bad) => Self::Unreadable {
                id: bad.id,
                unreadable: bad,
            },
        }
    }
}

fn print_table(list: &[DeadRow]) {
    if list.is_empty() {
        println!("no dead messages");
        return;
    }
    println!(
        "{:>10}  {:<24}  {:<24}  {:>8}  {:<20}  reason",
        "id", "topic", "event_type", "attempts", "dead_at"
    );
    for row in list {
        let m = match row {
            Ok(m) => m,
            Err(bad) => {
                println!(
                    "{:>10}  could not be read: column {}: {}",
                    bad.id,
                    bad.column,
                    printable(&cut(&bad.reason, LIST_TEXT))
                );
                continue;
            }
        };
        let reason = m.dead_reason.as_deref().unwrap_or("").replace('\n', " ");
        let reason = printable(&reason.chars().take(80).collect::<String>());
        println!(
            "{:>10}  {:<24}  {:<24}  {:>8}  {:<20}  {reason}",
            m.id,
            printable(&cut(&m.topic, LIST_TEXT)),
            printable(&cut(&m.event_type, LIST_TEXT)),
            m.attempts,
            m.dead_at
                .map(|t| match t {
                    Timestamp::At(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    other => other.to_string(),
                })
                .unwrap_or_default(),
        );
    }
}

fn print_message(m: &Shown<'_>) {
    let opt = |v: &Option<Cow<'_, str>>| v.as_deref().map_or_else(|| "-".into(), printable);
    println!("id: {}", m.id);
    println!("event_id: {}", m.event_id);
    println!("event_type: {}", printable(&m.event_type));
    println!("event_version: {}", m.event_version);
    println!("aggregate_type: {}", printable(&m.aggregate_type));
    println!("aggregate_id: {}", printable(&m.aggregate_id));
    println!("topic: {}", printable(&m.topic));
    println!("status: {}", printable(&m.status));
    println!("attempts: {}", m.attempts);
    println!("created_at: {}", m.created_at);
    println!("next_run_at: {}", m.next_run_at);
    println!(
        "dead_at: {}",
        m.dead_at.map_or_else(|| "-".into(), |t| t.to_string())
    );
    println!("dead_reason: {}", opt(&m.dead_reason));
    println!("last_error: {}", opt(&m.last_error));
    println!("headers: {}", printable_json(&reformat(&m.headers, false)));
    println!("payload: {}", printable_json(&reformat(&m.payload, true)));
}

/// `v` indented (`pretty`) or compact when `serde_json` can parse it
/// (within 128 levels, every number a 64-bit float), else as stored: never
/// an error.
fn reformat(v: &Json<'_>, pretty: bool) -> String {
    let Json::Raw(p) = v else {
        return v.text().into_owned();
    };
    p.to_value()
        .ok()
        .and_then(|v| {
            if pretty {
                serde_json::to_string_pretty(&v).ok()
            } else {
                serde_json::to_string(&v).ok()
            }
        })
        .unwrap_or_else(|| p.get().to_owned())
}
