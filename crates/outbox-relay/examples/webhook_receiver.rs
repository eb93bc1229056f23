//! A webhook endpoint for the `http(s)://` publisher: checks the Standard
//! Webhooks signature and age, then processes each event once.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/postgres OUTBOX_WEBHOOK_SECRET=whsec_... \
//!   cargo run -p outbox-relay --example webhook_receiver -- [127.0.0.1:8080] [schema=outbox]
//! # then: outbox relay --publisher http://127.0.0.1:8080/webhook
//! ```
//!
//! Answers: 204 when processed or a duplicate; 401 for a bad signature or
//! a stale timestamp (permanent for the relay, which dead-letters it); 503
//! when the database fails (retryable: the relay tries again later).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use outbox::{Delivery, Inbox, Outbox};
use outbox_relay::publishers::http::WebhookSecret;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Signatures older or newer than this are refused, against replays.
const TOLERANCE_SECS: i64 = 5 * 60;

struct App {
    secret: WebhookSecret,
    inbox: Inbox,
    db: Mutex<tokio_postgres::Client>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let schema = args.next().unwrap_or_else(|| "outbox".into());
    let secret = WebhookSecret::parse(&std::env::var("OUTBOX_WEBHOOK_SECRET")?)?;
    let (db, conn) =
        tokio_postgres::connect(&std::env::var("DATABASE_URL")?, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Outbox::new(&schema)?.migrate(&db).await?;
    let app = Arc::new(App {
        secret,
        inbox: Inbox::new(&schema)?,
        db: Mutex::new(db),
    });

    let router = axum::Router::new()
        .route("/webhook", post(receive))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}/webhook");
    axum::serve(listener, router).await?;
    Ok(())
}

async fn receive(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let id = header("webhook-id");
    let Ok(ts) = header("webhook-timestamp").parse::<i64>() else {
        return StatusCode::UNAUTHORIZED;
    };
    if (chrono::Utc::now().timestamp() - ts).abs() > TOLERANCE_SECS
        || !app
            .secret
            .verify(id, ts, &body, header("webhook-signature"))
    {
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    // The webhook-id is the event_id.
    let Ok(event_id) = id.parse::<uuid::Uuid>() else {
        return StatusCode::BAD_REQUEST;
    };
    let topic = event["topic"].as_str().unwrap_or_default().to_owned();
    match process(&app, event_id, &topic, &event).await {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(e) => {
            eprintln!("{id}: {e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

async fn process(
    app: &App,
    id: uuid::Uuid,
    topic: &str,
    event: &serde_json::Value,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut db = app.db.lock().await;
    let tx = db.transaction().await?;
    match app.inbox.record(&tx, id, topic).await? {
        Delivery::First => {
            // The business work goes here, on `tx`.
            println!("processed {id} ({}): {}", event["type"], event["data"]);
        }
        Delivery::Duplicate => println!("skipped duplicate {id}"),
    }
    tx.commit().await?;
    Ok(())
}
