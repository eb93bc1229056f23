//! The webhook publisher against receivers that attack it: an endless
//! error body, a body that trickles forever, NUL bytes in the body. The
//! publish returns within the configured timeout, holds a bounded error,
//! and the relay can store that error.

#![cfg(feature = "publisher-http")]

use crate::support;

use outbox_relay::publishers::http::{HttpConfig, HttpPublisher, MAX_ERROR_BODY};
use outbox_relay::{PublishError, Publisher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::messages;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How the hostile receiver answers after the request headers.
#[derive(Clone, Copy)]
enum Attack {
    /// 500 and a chunked body that never ends, written as fast as possible.
    Flood,
    /// 500 and one byte of body every 100 ms, forever.
    Trickle,
}

/// Starts a receiver; returns its URL and the bytes of body it managed to send.
async fn hostile(attack: Attack) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 500 Internal Server Error\r\n\
                            content-type: text/plain\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let (chunk, pause) = match attack {
                    Attack::Flood => ([b'x'; 16 * 1024].to_vec(), None),
                    Attack::Trickle => (b"\0".to_vec(), Some(Duration::from_millis(100))),
                };
                let framed = [
                    format!("{:x}\r\n", chunk.len()).into_bytes(),
                    chunk.clone(),
                    b"\r\n".to_vec(),
                ]
                .concat();
                loop {
                    if sock.write_all(&framed).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    if let Some(p) = pause {
                        tokio::time::sleep(p).await;
                    }
                }
            });
        }
    });
    (url, sent)
}

fn publisher(url: &str, timeout: Duration) -> HttpPublisher {
    let mut cfg = HttpConfig::new(url).unwrap();
    cfg.timeout = timeout;
    HttpPublisher::new(cfg).unwrap()
}

#[tokio::test]
async fn an_endless_error_body_is_read_to_a_few_kib_and_the_connection_dropped() {
    let (url, sent) = hostile(Attack::Flood).await;
    let p = publisher(&url, Duration::from_secs(10));
    let started = Instant::now();
    let outcomes = p.publish(&messages(1, "t")).await;
    let took = started.elapsed();
    let e = outcomes[0].as_ref().unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(e.message.contains("500"), "{}", e.message);
    assert!(e.message.len() <= MAX_ERROR_BODY, "{}", e.message.len());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The receiver notices the connection closed: what it sent since is
    // only what the socket buffers absorbed, not an endless stream.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = sent.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sent.load(Ordering::Relaxed), after, "still sending");
    assert!(after < 64 * 1024 * 1024, "{after} bytes sent");
}

#[tokio::test]
async fn a_trickling_error_body_ends_at_the_request_timeout() {
    let (url, _) = hostile(Attack::Trickle).await;
    let p = publisher(&url, Duration::from_secs(1));
    let started = Instant::now();
    let outcomes = p.publish(&messages(1, "t")).await;
    let took = started.elapsed();
    let e = outcomes[0].as_ref().unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // What is stored holds no NUL (PostgreSQL text refuses it).
    assert!(!PublishError::stored(&e.message).contains('\0'));
}

#[test]
fn stored_errors_are_bounded_at_a_char_boundary() {
    let long = "é".repeat(PublishError::MAX_STORED);
    let s = PublishError::stored(&long);
    assert!(s.len() <= PublishError::MAX_STORED && s.len() > PublishError::MAX_STORED - 4);
    assert!(long.starts_with(&*s));
    assert_eq!(PublishError::stored("a\0b"), "a\u{fffd}b");
    assert_eq!(PublishError::stored("short"), "short");
}

#[tokio::test]
async fn the_relay_stores_a_hostile_error_body_bounded_and_without_nul() {
    let schema = outbox_testkit::TestSchema::new("http_hostile_store").await;
    let client = schema.pool.get().await.unwrap();
    let msg = outbox::NewMessage::new("e", "a", "1", &serde_json::json!({})).unwrap();
    outbox::Outbox::with_schema(schema.schema.clone())
        .enqueue(&**client, &msg)
        .await
        .unwrap();
    // NUL bytes until the request timeout: PostgreSQL text refuses NUL, so
    // stored raw the whole settle would fail and the row stay claimed.
    let (url, _) = hostile(Attack::Trickle).await;
    let relay = outbox_relay::Relay::new(
        outbox_relay::Store::new(schema.pool.clone(), schema.schema.clone()),
        publisher(&url, Duration::from_secs(1)),
        outbox_relay::RelayConfig::default(),
    )
    .unwrap();
    let stats = relay.run_once().await.unwrap();
    assert_eq!((stats.claimed, stats.failed), (1, 1));
    let stored = schema
        .count(
            "SELECT count(*) FROM {schema}.all_messages WHERE status = 'failed' \
             AND octet_length(last_error) <= 4096 AND last_error LIKE '%500%'",
        )
        .await;
    assert_eq!(stored, 1);
}
