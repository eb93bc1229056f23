//! A TCP proxy that makes a network bad on purpose: it delays every chunk,
//! and can cut every connection (a reset, as a flapping link or a NAT
//! timeout would) or refuse new ones, or partition the network: packets
//! dropped, nothing closed, as when a link or a NAT between two hosts loses
//! its state. For fault tests between the relay and its database or broker.

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
    net: Arc<Partition>,
    accept: tokio::task::JoinHandle<()>,
}

/// A partition's state, shared with every connection's pipe.
#[derive(Debug, Default)]
struct Partition {
    /// While set, nothing is forwarded.
    on: AtomicBool,
    /// Partitions so far: a connection open when one began never forwards
    /// again, even once healed (its packets were lost; TCP would retransmit,
    /// but the path's state is gone, so they go nowhere).
    generation: AtomicU64,
}

impl Partition {
    fn swallows(&self, born: u64) -> bool {
        self.on.load(Ordering::SeqCst) || self.generation.load(Ordering::SeqCst) != born
    }
}

impl FaultyProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        Self::start_on(([127, 0, 0, 1], 0).into(), target).await
    }

    /// Listens on `bind` (port 0: a free one) and forwards to `target`.
    pub async fn start_on(bind: SocketAddr, target: SocketAddr) -> Self {
        let listener = TcpListener::bind(bind).await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let refusing = Arc::new(AtomicBool::new(false));
        let (cut, _) = watch::channel(0u64);
        let net = Arc::new(Partition::default());
        let accept = {
            let (delay_ms, refusing, cut) = (delay_ms.clone(), refusing.clone(), cut.clone());
            let net = net.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if refusing.load(Ordering::Relaxed) {
                        drop(client);
                        continue;
                    }
                    if net.on.load(Ordering::SeqCst) {
                        // The client's SYN got an answer (the proxy is
                        // local), the rest goes nowhere: kept open, read,
                        // dropped.
                        tokio::spawn(swallow(client));
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    let born = net.generation.load(Ordering::SeqCst);
                    let link = Link {
                        delay_ms: delay_ms.clone(),
                        net: net.clone(),
                        born,
                    };
                    tokio::spawn(pipe(client, server, link, cut.subscribe()));
                }
            })
        };
        Self {
            addr,
            delay_ms,
            refusing,
            cut,
            net,
            accept,
        }
    }

    /// Partitions the network: from now on nothing any open connection
    /// sends arrives, and new connections are accepted but go nowhere;
    /// nothing is closed or reset.
    pub fn partition(&self) {
        self.net.generation.fetch_add(1, Ordering::SeqCst);
        self.net.on.store(true, Ordering::SeqCst);
    }

    /// Ends the partition: new connections work again; the ones open
    /// during it stay dead (and open).
    pub fn heal(&self) {
        self.net.on.store(false, Ordering::SeqCst);
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

/// What a connection's pipe needs of the proxy.
struct Link {
    delay_ms: Arc<AtomicU64>,
    net: Arc<Partition>,
    born: u64,
}

/// Reads and drops whatever `client` sends, until it closes.
async fn swallow(mut client: TcpStream) {
    let mut buf = vec![0u8; 16 * 1024];
    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
}

async fn pipe(client: TcpStream, server: TcpStream, link: Link, mut cut: watch::Receiver<u64>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let Link {
        delay_ms,
        net,
        born,
    } = link;
    let d1 = delay_ms.clone();
    let n1 = net.clone();
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = cr.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(d1.load(Ordering::Relaxed))).await;
            if n1.swallows(born) {
                continue;
            }
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
            if net.swallows(born) {
                continue;
            }
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
