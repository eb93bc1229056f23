//! An MQTT consumer that processes each outbox event once, however often
//! the broker delivers it.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres \
//!   cargo run -p outbox-relay --example consume_mqtt -- [host=127.0.0.1] [port=1883] [filter=#] [schema=outbox]
//! ```
//!
//! The body is the outbox envelope (native JSON). Acks are manual: the
//! PUBACK goes out only after the transaction that handled the event and
//! recorded its event_id in the inbox has committed, so a crash in between
//! means a redelivery that the inbox recognises. A fixed client id and a
//! persistent session keep QoS 1 messages queued while the consumer is
//! away. `MAX_MESSAGES=N` stops after N deliveries.

use outbox::{Delivery, Inbox, Outbox};
use outbox_relay::Envelope;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let host = args.next().unwrap_or_else(|| "127.0.0.1".into());
    let port: u16 = args.next().map_or(Ok(1883), |p| p.parse())?;
    let filter = args.next().unwrap_or_else(|| "#".into());
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

    let mut opts = MqttOptions::new("outbox-example-consumer", host, port);
    opts.set_keep_alive(Duration::from_secs(30))
        .set_clean_session(false)
        .set_manual_acks(true);
    let (client, mut events) = AsyncClient::new(opts, 64);
    client.subscribe(&filter, QoS::AtLeastOnce).await?;
    println!("consuming {filter}");

    let mut handled = 0;
    loop {
        let Event::Incoming(Packet::Publish(publish)) = events.poll().await? else {
            continue;
        };
        let env = Envelope::from_json(std::str::from_utf8(&publish.payload)?)?;
        let event_id = env.event_id;
        let tx = db.transaction().await?;
        match inbox.record(&tx, event_id, &env.topic).await? {
            Delivery::First => {
                // The business work goes here, on `tx`.
                println!(
                    "processed {event_id} ({}) on {}: {}",
                    env.event_type, publish.topic, env.payload
                );
            }
            Delivery::Duplicate => println!("skipped duplicate {event_id}"),
        }
        tx.commit().await?;
        client.ack(&publish).await?;
        handled += 1;
        if handled == max {
            // Let the event loop send the last PUBACK before leaving.
            client.disconnect().await?;
            while !matches!(
                events.poll().await,
                Err(_) | Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect))
            ) {}
            return Ok(());
        }
    }
}
