//! A NATS JetStream consumer that processes each event once: a durable pull
//! consumer fetches messages, the event id goes into the outbox inbox inside
//! the consumer's own transaction, the transaction commits, then the message
//! is acked. A crash before the ack redelivers it; the inbox skips it.
//!
//! ```sh
//! outbox relay --publisher 'nats://127.0.0.1:4222?subject_prefix=app.&create_stream=APP' &
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres STREAM=APP \
//!   cargo run -p outbox-relay --example consume_nats
//! ```
//! Env: `DATABASE_URL`, `OUTBOX_SCHEMA` (default `outbox`), `NATS_URL`
//! (default `nats://127.0.0.1:4222`), `STREAM` (default `APP`), `DURABLE`
//! (default `example`), `EXIT_WHEN_IDLE=1` to stop once nothing is left.

use async_nats::jetstream::{self, consumer::pull};
use futures_util::StreamExt;
use outbox::{Delivery, Inbox};
use outbox_relay::Envelope;
use std::time::Duration;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut db, conn) =
        tokio_postgres::connect(&std::env::var("DATABASE_URL")?, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let inbox = Inbox::new(&env("OUTBOX_SCHEMA", "outbox"))?;
    let js = jetstream::new(async_nats::connect(env("NATS_URL", "nats://127.0.0.1:4222")).await?);
    let stream = js.get_stream(env("STREAM", "APP")).await?;
    let durable = env("DURABLE", "example");
    let consumer = stream
        .get_or_create_consumer(
            &durable,
            pull::Config {
                durable_name: Some(durable.clone()),
                ..Default::default()
            },
        )
        .await?;
    let exit_when_idle = std::env::var("EXIT_WHEN_IDLE").is_ok();

    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(100)
            .expires(Duration::from_secs(5))
            .messages()
            .await?;
        let mut seen = 0;
        while let Some(msg) = batch.next().await {
            let msg = msg.map_err(|e| anyhow::anyhow!(e))?;
            seen += 1;
            let body = std::str::from_utf8(&msg.payload)?;
            let headers = msg.headers.as_ref().map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.to_string(), v.first()?.as_str().to_owned())))
                    .collect::<Vec<_>>()
            });
            let headers = headers.unwrap_or_default();
            let event = Envelope::from_fields(
                headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .chain([("payload", body)]),
            )?;

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
            msg.ack().await.map_err(|e| anyhow::anyhow!(e))?;
        }
        if seen == 0 && exit_when_idle {
            return Ok(());
        }
    }
}
