//! Networking for tests of a running relay: free ports, a bare HTTP GET,
//! Prometheus text sums, and a TCP proxy the test can shut.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// Waits for `cond` up to a generous deadline; no timing is asserted.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_showing(what, cond, String::new);
}

/// [`wait_for`], and on timeout the failure shows `context()` too (the
/// relay's stderr, say: [`Stderr`]).
pub fn wait_for_showing(what: &str, mut cond: impl FnMut() -> bool, context: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A file a child process writes its stderr to, read back for a failure
/// message.
pub struct Stderr(tempfile::NamedTempFile);

impl Stderr {
    pub fn new() -> Self {
        Self(tempfile::NamedTempFile::new().unwrap())
    }

    /// For `Command::stderr`.
    pub fn stdio(&self) -> std::process::Stdio {
        self.0.reopen().unwrap().into()
    }

    /// What the process wrote so far, headed for a failure message.
    pub fn text(&self) -> String {
        let text = std::fs::read_to_string(self.0.path()).unwrap_or_default();
        format!("the relay's stderr:\n{text}")
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` → (status, body), or `None` if nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Sum of every sample of `name` in a Prometheus text exposition.
pub fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A relay process, killed when dropped (a failing test must not leave it).
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP proxy to the test PostgreSQL, so the test can take the database
/// away from the relay (and only from the relay) by shutting the proxy.
pub struct Proxy {
    port: u16,
    pub stop: proxy_stop::Stop,
}

mod proxy_stop {
    //! The proxy runs on plain threads; `Stop` closes the listener and every
    //! connection it forwarded.
    use std::net::{Shutdown, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub struct Stop {
        pub stopped: Arc<AtomicBool>,
        pub conns: Arc<Mutex<Vec<TcpStream>>>,
    }

    impl Stop {
        pub fn track(&self, s: &TcpStream) {
            if let Ok(c) = s.try_clone() {
                self.conns.lock().unwrap().push(c);
            }
        }

        pub fn is_stopped(&self) -> bool {
            self.stopped.load(Ordering::SeqCst)
        }

        pub fn stop(&self) {
            self.stopped.store(true, Ordering::SeqCst);
            for c in self.conns.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Proxy {
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = proxy_stop::Stop::default();
        let s = stop.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if s.is_stopped() {
                    // Refuse: drop the connection as soon as it arrives.
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                s.track(&client);
                s.track(&server);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self { port, stop }
    }

    /// `DATABASE_URL` through the proxy: its user, database and
    /// parameters, the proxy's address.
    pub fn url(&self) -> String {
        outbox_testkit::database_url_via(self.port)
    }
}

/// The test database's address, from `DATABASE_URL`.
pub fn upstream() -> SocketAddr {
    let cfg: tokio_postgres::Config = outbox_testkit::database_url().parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => "127.0.0.1".to_owned(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let host = if host == "localhost" {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    format!("{host}:{port}").parse().unwrap()
}
