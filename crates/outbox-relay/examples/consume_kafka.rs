//! A Kafka consumer that processes each event once: offsets are committed
//! by hand, after the event id went into the outbox inbox inside the
//! consumer's own transaction and that transaction committed. A crash before
//! the offset commit redelivers the record; the inbox skips it.
//!
//! ```sh
//! outbox relay --publisher 'kafka://127.0.0.1:9092' &
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres TOPIC=orders \
//!   cargo run -p outbox-relay --example consume_kafka
//! ```
//! Env: `DATABASE_URL`, `OUTBOX_SCHEMA` (default `outbox`), `KAFKA_BROKERS`
//! (default `127.0.0.1:9092`), `TOPIC` (default `orders`), `GROUP` (default
//! `example`).

use outbox::{Delivery, Inbox};
use outbox_relay::Envelope;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut db, conn) =
        tokio_postgres::connect(&std::env::var("DATABASE_URL")?, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let inbox = Inbox::new(&env("OUTBOX_SCHEMA", "outbox"))?;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS", "127.0.0.1:9092"))
        .set("group.id", env("GROUP", "example"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&env("TOPIC", "orders")])?;

    loop {
        let record = consumer.recv().await?;
        let mut fields: Vec<(&str, &str)> = Vec::new();
        if let Some(headers) = record.headers() {
            for h in headers.iter() {
                if let Some(v) = h.value {
                    fields.push((h.key, std::str::from_utf8(v)?));
                }
            }
        }
        let body = std::str::from_utf8(record.payload().unwrap_or_default())?;
        fields.push(("payload", body));
        let event = Envelope::from_fields(fields)?;

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
        consumer.commit_message(&record, CommitMode::Async)?;
    }
}
