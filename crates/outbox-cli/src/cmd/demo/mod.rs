//! The seed lab, reproduced line for line on the real engine.

use anyhow::{bail, Context};
use deadpool_postgres::Pool;
use outbox::{Delivery, Inbox, NewMessage, Outbox, Schema};
use outbox_relay::admin::get;
use outbox_relay::publishers::postgres::PostgresPublisher;
use outbox_relay::publishers::postgres::{published_after, published_count};
use outbox_relay::{Relay, RelayConfig, RetryPolicy, Store};
use sql::DemoQueries;
use std::sync::Arc;
use std::time::Duration;

mod sql;

/// `outbox demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    step: Step,
}

#[derive(Debug, clap::Subcommand)]
enum Step {
    /// Insert an order and its `order.created` event in one transaction.
    CreateOrder,
    /// One relay pass (batch of 10), then the table counts.
    Relay,
    /// Publish, "crash" before marking sent, recover, publish again.
    ///
    /// The recovery is the production lease reaper told the claimant is
    /// dead, so the crashed claim counts as expired at once. (A real relay waits for
    /// --lease, 5m by default, and never sweeps live claims.)
    CrashWindow,
    /// Run an idempotent consumer (the inbox) over published_events.
    Consume,
    /// All of the above in order on a fresh schema.
    Tour,
}

pub async fn run(url: Option<String>, schema: Schema, args: Args) -> anyhow::Result<()> {
    let (url, _throwaway) = crate::db::url_or_throwaway(url, false)?;
    let demo = Demo::connect(&url, schema).await?;
    match args.step {
        Step::CreateOrder => demo.create_order().await,
        Step::Relay => demo.relay().await,
        Step::CrashWindow => demo.crash_window().await,
        Step::Consume => demo.consume().await,
        Step::Tour => demo.tour().await,
    }
}

struct Demo {
    pool: Pool,
    schema: Schema,
    q: Arc<DemoQueries>,
    outbox: Outbox,
}

impl Demo {
    async fn connect(url: &str, schema: Schema) -> anyhow::Result<Self> {
        let pool = crate::db::connect(url, 4).await?;
        let q = Arc::new(DemoQueries::new(&schema));
        let client = pool.get().await?;
        outbox::migrate(&**client, &schema).await?;
        client.batch_execute(&q.create_orders).await?;
        Ok(Self {
            outbox: Outbox::with_schema(schema.clone()),
            pool,
            schema,
            q,
        })
    }

    fn relay_with(&self, config: RelayConfig) -> anyhow::Result<Relay<PostgresPublisher>> {
        let store = Store::new(self.pool.clone(), self.schema.clone());
        let publisher = PostgresPublisher::new(self.pool.clone(), &self.schema, &config.relay_id);
        Ok(Relay::new(store, publisher, config)?)
    }

    /// The seed's CreateOrder, printing its line.
    async fn create_order(&self) -> anyhow::Result<()> {
        let (order_id, message_id) = self.insert_order().await?;
        println!("order_id={order_id} outbox_message_id={message_id}");
        Ok(())
    }

    async fn relay(&self) -> anyhow::Result<()> {
        let relay = self.relay_with(RelayConfig {
            batch_size: 10,
            ..RelayConfig::default()
        })?;
        let pass = relay.run_once().await;
        // The next demo step is another relay: free the buckets now.
        relay.leave().await;
        println!("{}", pass?);
        let client = self.pool.get().await?;
        let row = client.query_one(&self.q.counts, &[]).await?;
        println!(
            "orders={} outbox_messages={} published_events={}",
            get::<i64>(&row, "orders")?,
            get::<i64>(&row, "messages")?,
            get::<i64>(&row, "published")?
        );
        Ok(())
    }

    async fn crash_window(&self) -> anyhow::Result<()> {
        let client = self.pool.get().await?;
        let unsettled: i64 = get(&client.query_one(&self.q.unsettled, &[]).await?, "count")?;
        if unsettled > 0 {
            bail!(
                "crash-window needs no other unsent messages in schema {}, found {unsettled}: run `outbox demo relay` first",
                self.schema
            );
        }
        let (_, message_id) = self.insert_order().await?;
        println!("message_id={message_id}");
        // Zero backoff: the expired lease counts as a failed attempt, and the
        // seed's second relay retries it at once rather than after the first
        // step.
        let relay = self.relay_with(RelayConfig {
            batch_size: 1,
            retry: RetryPolicy {
                schedule: vec![Duration::ZERO],
                ..RetryPolicy::default()
            },
            ..RelayConfig::default()
        })?;
        let first = relay.claim_and_publish().await?;
        println!(
            "first_relay claimed={} published={} marked_sent=0 simulated_crash=true",
            first.claimed(),
            first.published()
        );
        drop(first); // the process "dies" here: published, never marked sent
        let after_crash = self.published_count(message_id).await?;
        // The claimant is known dead: the reaper need not wait out the lease.
        let recovered = relay.reap_older_than(Duration::ZERO).await?;
        println!("published_after_crash={after_crash} recovered_processing={recovered}");
        let second = relay.run_once().await;
        relay.leave().await;
        let second = second?;
        println!(
            "second_relay claimed={} published={} marked_sent={}",
            second.claimed, second.published, second.marked_sent
        );
        println!(
            "published_after_retry={}",
            self.published_count(message_id).await?
        );
        Ok(())
    }

    /// Inserts an order and its `order.created` event in one transaction:
    /// both commit or neither does. Returns (order id, outbox message id).
    async fn insert_order(&self) -> anyhow::Result<(i64, i64)> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let order_no = format!("ORD-{}", uuid::Uuid::now_v7().simple());
        let amount_cents: i64 = 1999;
        let order_id: i64 = get(
            &tx.query_one(&self.q.insert_order, &[&order_no, &amount_cents])
                .await?,
            "id",
        )?;
        let payload = serde_json::json!({
            "event_id": format!("order-{order_id}-created"),
            "order_id": order_id,
            "order_no": order_no,
            "amount_cents": amount_cents,
        });
        let msg = NewMessage::new("order.created", "order", order_id.to_string(), &payload)?;
        let enqueued = self.outbox.enqueue(&*tx, &msg).await?;
        tx.commit().await?;
        Ok((order_id, enqueued.id))
    }

    async fn published_count(&self, message_id: i64) -> anyhow::Result<i64> {
        let client = self.pool.get().await?;
        Ok(published_count(&client, &self.schema, message_id).await?)
    }

    /// An idempotent consumer: each delivery is handled in its own
    /// transaction that also records the event id, so a redelivery is
    /// recognised and skipped.
    async fn consume(&self) -> anyhow::Result<()> {
        let inbox = Inbox::with_schema(&self.schema);
        let mut client = self.pool.get().await?;
        let (mut processed, mut skipped, mut after) = (0u64, 0u64, 0i64);
        loop {
            let events = published_after(&client, &self.schema, after).await?;
            if events.is_empty() {
                break;
            }
            for event in events {
                after = event.id;
                let (event_id, topic, payload) = (event.event_id, event.topic, event.payload);
                let tx = client.transaction().await?;
                match inbox.record(&*tx, event_id, &topic).await? {
                    Delivery::First => {
                        let order_id = payload.to_value()?["order_id"]
                            .as_i64()
                            .context("order.created payload without order_id")?;
                        tx.execute(&self.q.confirm_order, &[&order_id]).await?;
                        processed += 1;
                    }
                    Delivery::Duplicate => skipped += 1,
                }
                tx.commit().await?;
            }
        }
        println!("processed={processed} duplicates_skipped={skipped}");
        Ok(())
    }

    async fn tour(&self) -> anyhow::Result<()> {
        let client = self.pool.get().await?;
        let row = client.query_one(&self.q.counts, &[]).await?;
        let (orders, messages, published): (i64, i64, i64) = (
            get(&row, "orders")?,
            get(&row, "messages")?,
            get(&row, "published")?,
        );
        if orders + messages + published > 0 {
            bail!(
                "schema {} already holds demo data; the tour needs a fresh schema: pass --schema <new name> or use a fresh database",
                self.schema
            );
        }
        println!("# outbox demo create-order (x3): order and event in one transaction");
        for _ in 0..3 {
            self.create_order().await?;
        }
        println!("# outbox demo relay: claim, publish, mark sent");
        self.relay().await?;
        println!("# outbox demo crash-window: published, crashed before marking, recovered, published again");
        self.crash_window().await?;
        println!("# outbox demo consume: the inbox processes each event once");
        self.consume().await
    }
}
