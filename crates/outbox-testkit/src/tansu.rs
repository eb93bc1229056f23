//! A Kafka-protocol broker per test: Tansu, run as its own process on its
//! own port with its own SQLite storage, so a test can crash and restart
//! its broker without touching another test's, and no test reads a broker
//! that earlier sessions have worn (Tansu 0.6.0 has stopped serving fetches
//! after many producer and consumer sessions on one process).
//!
//! The binary is the one `scripts/test.sh` installs into its cache
//! (`OUTBOX_TANSU` names another).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Tansu version `scripts/services.sh` installs.
pub const TANSU_VERSION: &str = "0.6.0";

/// One running broker; killed (SIGKILL) and its storage removed on drop.
#[derive(Debug)]
pub struct Tansu {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Tansu {
    /// The Tansu binary: `OUTBOX_TANSU`, else where `scripts/test.sh`
    /// installs it (`OUTBOX_CACHE`, default `~/.cache/outbox`).
    pub fn binary() -> PathBuf {
        if let Some(p) = std::env::var_os("OUTBOX_TANSU") {
            return PathBuf::from(p);
        }
        let cache = std::env::var_os("OUTBOX_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/outbox")
            });
        let bin = cache.join(format!("tansu-{TANSU_VERSION}/bin/tansu"));
        assert!(
            bin.exists(),
            "{} is missing: scripts/test.sh installs it (or: scripts/services.sh tansu)",
            bin.display()
        );
        bin
    }

    /// Starts a broker on a free port with empty storage, and waits until
    /// it accepts connections.
    pub fn start() -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("addr").port()
        };
        let dir = std::env::temp_dir().join(format!(
            "outbox-tansu-{}-{port}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("broker directory");
        let mut me = Self {
            dir,
            port,
            child: None,
        };
        me.launch();
        me
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers` and `kafka://` URLs.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Creates `topic` with `partitions` partitions (Tansu does not create
    /// topics on first use).
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let out = Command::new(Self::binary())
            .args(["topic", "create", "--broker"])
            .arg(format!("tcp://{}", self.bootstrap()))
            .arg(topic)
            .args(["--partitions", &partitions.to_string()])
            .output()
            .expect("run tansu topic create");
        assert!(
            out.status.success(),
            "tansu topic create {topic}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Crashes the broker: SIGKILL, as a machine or container dies. (A
    /// SIGTERM with produce requests in flight can make Tansu 0.6.0 panic
    /// after its restart.)
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same port and storage.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// The broker's log so far, for a failing assertion's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("broker.log"))
            .expect("broker log");
        let url = format!("tcp://{}", self.bootstrap());
        // The storage path is relative to the working directory.
        let child = Command::new(Self::binary())
            .current_dir(&self.dir)
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start tansu");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("tansu exited at start ({status}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
