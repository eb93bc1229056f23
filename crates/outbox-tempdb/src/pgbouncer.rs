//! A throwaway PgBouncer (Debian's `pgbouncer`) in front of a database,
//! for tests of what producers, `outbox migrate` and the relay do through
//! a pooler: its own config in a temporary directory, a free loopback
//! port, stopped on drop.

use anyhow::{bail, Context};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running pgbouncer.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    database: String,
}

impl PgBouncer {
    /// Starts pgbouncer in `pool_mode` (`transaction`, `session`) in front
    /// of `database` on `host:port` (trust, user `postgres`), with at most
    /// `pool_size` server connections, so that clients share them.
    pub fn start(
        host: &str,
        port: u16,
        database: &str,
        pool_mode: &str,
        pool_size: u32,
    ) -> anyhow::Result<Self> {
        let bin = find_pgbouncer().context(
            "pgbouncer is not installed (Debian: apt-get install pgbouncer; scripts/test.sh installs it)",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("outbox-pgbouncer-")
            .tempdir()?;
        let listen = crate::free_port()?;
        let d = dir.path();
        std::fs::write(d.join("userlist.txt"), "\"postgres\" \"\"\n")?;
        let ini = format!(
            "[databases]\n\
             {database} = host={host} port={port} dbname={database}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {listen}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {auth}\n\
             pool_mode = {pool_mode}\n\
             default_pool_size = {pool_size}\n\
             max_client_conn = 500\n\
             logfile = {log}\n\
             pidfile = {pid}\n",
            auth = d.join("userlist.txt").display(),
            log = d.join("pgbouncer.log").display(),
            pid = d.join("pgbouncer.pid").display(),
        );
        std::fs::write(d.join("pgbouncer.ini"), ini)?;
        let mut cmd = Command::new(bin);
        cmd.arg(d.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // pgbouncer refuses to run as root.
        if crate::is_root() {
            let (uid, gid) = crate::postgres_user()?;
            std::os::unix::fs::chown(d, Some(uid), Some(gid))?;
            for f in ["userlist.txt", "pgbouncer.ini"] {
                std::os::unix::fs::chown(d.join(f), Some(uid), Some(gid))?;
            }
            cmd.uid(uid).gid(gid);
        }
        let child = cmd.spawn().context("cannot run pgbouncer")?;
        let mut me = Self {
            child,
            dir,
            port: listen,
            database: database.to_owned(),
        };
        me.wait_listening()?;
        Ok(me)
    }

    fn wait_listening(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                bail!("pgbouncer exited ({status}): {} {}", err.trim(), self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "pgbouncer did not listen on {} within 10 s: {}",
            self.port,
            self.log()
        )
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    /// The URL of the database through pgbouncer.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            self.port, self.database
        )
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_pgbouncer() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file())
}
