//! A RabbitMQ consumer that processes each outbox event once, however often
//! the broker delivers it.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres \
//!   cargo run -p outbox-relay --example consume_amqp -- \
//!   [amqp://guest:guest@127.0.0.1:5672/%2f] [exchange=outbox] [binding=#] [schema=outbox]
//! ```
//!
//! Each delivery is handled in one database transaction that also records
//! its `message_id` (the event_id) in the inbox; the broker ack comes only
//! after the commit. A crash between commit and ack makes the broker
//! redeliver, and the inbox then reports a duplicate, so the work is not
//! done twice. `MAX_MESSAGES=N` stops after N deliveries.

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use outbox::{Delivery, Inbox, Outbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let exchange = args.next().unwrap_or_else(|| "outbox".into());
    let binding = args.next().unwrap_or_else(|| "#".into());
    let schema = args.next().unwrap_or_else(|| "outbox".into());
    let max: usize = std::env::var("MAX_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);

    let db_url = std::env::var("DATABASE_URL")?;
    let (mut db, conn) = tokio_postgres::connect(&db_url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Outbox::new(&schema)?.migrate(&db).await?;
    let inbox = Inbox::new(&schema)?;

    let props = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    let amqp = Connection::connect(&url, props).await?;
    let ch = amqp.create_channel().await?;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        &exchange,
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    )
    .await?;
    let queue = format!("{exchange}.example-consumer");
    let qopts = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(&queue, qopts, FieldTable::default())
        .await?;
    ch.queue_bind(
        &queue,
        &exchange,
        &binding,
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let mut deliveries = ch
        .basic_consume(
            &queue,
            "example",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    println!("consuming {queue} (bound to {exchange} with {binding})");

    let mut handled = 0;
    while let Some(delivery) = deliveries.next().await {
        let delivery = delivery?;
        let Some(event_id) = delivery
            .properties
            .message_id()
            .as_ref()
            .and_then(|s| s.as_str().parse::<uuid::Uuid>().ok())
        else {
            eprintln!("skipping a message without a UUID message_id");
            delivery.ack(BasicAckOptions::default()).await?;
            continue;
        };
        let topic = delivery.routing_key.to_string();
        let tx = db.transaction().await?;
        match inbox.record(&tx, event_id, &topic).await? {
            Delivery::First => {
                // The business work goes here, on `tx`.
                let payload: serde_json::Value = serde_json::from_slice(&delivery.data)?;
                println!("processed {event_id} on {topic}: {payload}");
            }
            Delivery::Duplicate => println!("skipped duplicate {event_id}"),
        }
        tx.commit().await?;
        delivery.ack(BasicAckOptions::default()).await?;
        handled += 1;
        if handled == max {
            break;
        }
    }
    Ok(())
}
