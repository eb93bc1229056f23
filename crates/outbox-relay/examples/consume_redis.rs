//! A Redis Streams consumer that processes each event once: it reads with a
//! consumer group, records the event id in the outbox inbox inside its own
//! transaction (with whatever business writes it does), commits, then acks.
//! A crash before the ack redelivers the entry; the inbox skips it.
//!
//! ```sh
//! outbox relay --publisher 'redis://127.0.0.1:6379' &   # publishes topic `orders` to stream `orders`
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres STREAM=orders \
//!   cargo run -p outbox-relay --example consume_redis
//! ```
//! Env: `DATABASE_URL`, `OUTBOX_SCHEMA` (default `outbox`), `REDIS_URL`
//! (default `redis://127.0.0.1:6379`), `STREAM` (default `orders`), `GROUP`
//! (default `example`), `EXIT_WHEN_IDLE=1` to stop once nothing is left.

use outbox::{Delivery, Inbox};
use outbox_relay::Envelope;
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut db, conn) =
        tokio_postgres::connect(&std::env::var("DATABASE_URL")?, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let inbox = Inbox::new(&env("OUTBOX_SCHEMA", "outbox"))?;
    // No response timeout: XREADGROUP ... BLOCK holds the reply back on purpose.
    let mut redis = redis::Client::open(env("REDIS_URL", "redis://127.0.0.1:6379"))?
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await?;
    let (stream, group) = (env("STREAM", "orders"), env("GROUP", "example"));
    let exit_when_idle = std::env::var("EXIT_WHEN_IDLE").is_ok();

    // Start the group at the beginning of the stream; it may already exist.
    let created: redis::RedisResult<()> = redis.xgroup_create_mkstream(&stream, &group, "0").await;
    if let Err(e) = created {
        anyhow::ensure!(e.code() == Some("BUSYGROUP"), e);
    }

    // "0" first: entries this consumer read before a crash and never acked.
    let mut from = "0";
    loop {
        let opts = StreamReadOptions::default()
            .group(&group, "consumer-1")
            .count(100)
            .block(5_000);
        let reply: StreamReadReply = redis.xread_options(&[&stream], &[from], &opts).await?;
        let entries: Vec<_> = reply.keys.into_iter().flat_map(|k| k.ids).collect();
        if entries.is_empty() {
            if from == "0" {
                from = ">";
                continue;
            }
            if exit_when_idle {
                return Ok(());
            }
            continue;
        }
        for entry in entries {
            let fields: Vec<(String, String)> = entry
                .map
                .iter()
                .map(|(k, v)| Ok((k.clone(), redis::from_redis_value_ref(v)?)))
                .collect::<redis::RedisResult<_>>()?;
            let event =
                Envelope::from_fields(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;

            let tx = db.transaction().await?;
            match inbox.record(&tx, event.event_id, &event.topic).await? {
                Delivery::First => {
                    // Business writes go here, on `tx`.
                    println!(
                        "processed {} {} {}",
                        event.event_id, event.event_type, event.payload
                    );
                }
                Delivery::Duplicate => println!("skipped duplicate {}", event.event_id),
            }
            tx.commit().await?;
            let _: i64 = redis.xack(&stream, &group, &[&entry.id]).await?;
        }
    }
}
