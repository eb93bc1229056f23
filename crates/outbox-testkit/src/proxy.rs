//! A TCP proxy that makes a network bad on purpose: it delays every chunk,
//! and can cut every connection (a reset, as a flapping link or a NAT
//! timeout would) or refuse new ones. For fault tests between the relay and
//! its database or broker.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropped, it stops accepting (open connections end with the runtime).
#[derive(Debug)]
pub struct FaultyProxy {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    refusing: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultyProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let refusing = Arc::new(AtomicBool::new(false));
        let (cut, _) = watch::channel(0u64);
        let accept = {
            let (delay_ms, refusing, cut) = (delay_ms.clone(), refusing.clone(), cut.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if refusing.load(Ordering::Relaxed) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    tokio::spawn(pipe(client, server, delay_ms.clone(), cut.subscribe()));
                }
            })
        };
        Self {
            addr,
            delay_ms,
            refusing,
            cut,
            accept,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Delays every chunk in both directions by `d`.
    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::Relaxed);
    }

    /// Cuts every open connection.
    pub fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Refuses (closes at once) new connections while `on`.
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::Relaxed);
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    delay_ms: Arc<AtomicU64>,
    mut cut: watch::Receiver<u64>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let d1 = delay_ms.clone();
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = cr.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(d1.load(Ordering::Relaxed))).await;
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = sr.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(delay_ms.load(Ordering::Relaxed))).await;
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    // Whichever ends first (a side closed, or a cut) ends both: the halves
    // are dropped and the sockets closed.
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cut.changed() => {}
    }
}
