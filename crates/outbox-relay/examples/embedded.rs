//! The relay embedded in an application's own service: an HTTP endpoint
//! writes an order and its event in one transaction, and the same process
//! runs the whole relay engine (pipelines, lease reaper, bucket heartbeat,
//! backlog gauges, archiver when set) under one shutdown signal.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres \
//!   cargo run -p outbox-relay --example embedded -- [127.0.0.1:3000] [publisher URL, default postgres]
//! curl -X POST 127.0.0.1:3000/orders    # an order and its order.created event, atomically
//! curl 127.0.0.1:3000/metrics           # the relay's metrics, backlog gauges included
//! ```
//!
//! Ctrl-C stops the server and the relay together; the relay finishes (or
//! releases) its batches in flight before `run` returns.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use outbox::{NewMessage, Outbox, Schema};
use outbox_relay::publishers::{AnyPublisher, PublisherContext};
use outbox_relay::{Relay, RelayConfig, Store};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct App {
    pool: deadpool_postgres::Pool,
    outbox: Outbox,
}

/// `POST /orders`: the business row and the event commit together, or
/// neither does.
async fn create_order(State(app): State<App>) -> Result<String, (StatusCode, String)> {
    let fail = |e: &dyn std::fmt::Display| (StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    let mut client = app.pool.get().await.map_err(|e| fail(&e))?;
    let tx = client.transaction().await.map_err(|e| fail(&e))?;
    let id: i64 = tx
        .query_one(
            "INSERT INTO embedded_orders (total) VALUES ($1) RETURNING id",
            &[&1999_i64],
        )
        .await
        .map_err(|e| fail(&e))?
        .get(0);
    let event = NewMessage::new(
        "order.created",
        "order",
        id.to_string(),
        &serde_json::json!({ "order_id": id, "total": 1999 }),
    )
    .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?
    .topic("orders");
    let enqueued = app
        .outbox
        .enqueue(&*tx, &event)
        .await
        .map_err(|e| fail(&e))?;
    tx.commit().await.map_err(|e| fail(&e))?;
    Ok(format!("order {id}, event {}\n", enqueued.event_id))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let publisher_url = args.next().unwrap_or_else(|| "postgres".into());

    let schema = Schema::new("outbox")?;
    let pool = outbox_relay::pool(&url, 16)?;
    {
        let client = pool.get().await?;
        outbox::migrate(&**client, &schema).await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS embedded_orders \
                 (id BIGSERIAL PRIMARY KEY, total BIGINT NOT NULL)",
            )
            .await?;
    }

    // The gauges are counted only because a recorder exports them here.
    let metrics = PrometheusBuilder::new().install_recorder()?;
    let config = RelayConfig {
        gauge_interval: Some(Duration::from_secs(5)),
        ..RelayConfig::default()
    };
    let ctx = PublisherContext {
        pool: pool.clone(),
        schema: schema.clone(),
        relay_id: config.relay_id.clone(),
        // The webhook publisher's settings (signing secret, timeout, ...),
        // by name: `PublisherSettings::new().with("webhook_secret", …)`.
        settings: Default::default(),
    };
    let publisher = AnyPublisher::from_url(&publisher_url, &ctx).await?;
    let relay = Relay::new(Store::new(pool.clone(), schema.clone()), publisher, config)?
        .with_listener(url.parse()?);

    let app = Router::new()
        .route("/orders", post(create_order))
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .with_state(App {
            pool,
            outbox: Outbox::with_schema(schema),
        });
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}; relay publishing to {publisher_url}");

    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    let server =
        axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let (served, ran) = tokio::join!(server, relay.run(shutdown));
    served?;
    ran?;
    Ok(())
}
