//! A throwaway PostgreSQL (for `outbox demo` and `bench` without
//! `DATABASE_URL`, and for fault tests that restart the server): a fresh
//! cluster from the local installation's `initdb`/`pg_ctl` in a temporary
//! directory, on a free loopback port, stopped and deleted on drop.

use anyhow::{bail, Context};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod pair;
mod pgbouncer;
pub use pair::Pair;
pub use pgbouncer::PgBouncer;

/// A running throwaway cluster.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    owner: Option<(u32, u32)>,
    fsync: bool,
    /// `-c` settings added at every start (TLS).
    settings: Vec<String>,
}

impl EmbeddedPostgres {
    /// Starts a cluster, or explains why none can be started. `fsync`
    /// off suits a demo; benchmarks keep it on to measure what production sees.
    pub fn start(fsync: bool) -> anyhow::Result<Self> {
        let me = Self::init(fsync)?;
        me.start_server()?;
        Ok(me)
    }

    /// Starts a cluster that accepts only TLS connections over TCP (the
    /// socket stays plain), serving the certificate `cert` with its key
    /// `key` (PEM files, copied into the cluster's directory): a managed
    /// database's policy, for tests of the relay's TLS.
    pub fn start_tls_only(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let mut me = Self::init(false)?;
        let data = me.data_dir();
        for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
            let to = data.join(name);
            std::fs::copy(from, &to).with_context(|| format!("cannot copy {}", from.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))?;
            if let Some((uid, gid)) = me.owner {
                std::os::unix::fs::chown(&to, Some(uid), Some(gid))?;
            }
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostnossl all all 127.0.0.1/32 reject\n",
        )?;
        me.settings = vec![
            "ssl=on".into(),
            "ssl_cert_file=server.crt".into(),
            "ssl_key_file=server.key".into(),
        ];
        me.start_server()?;
        Ok(me)
    }

    /// A fresh cluster, not started.
    fn init(fsync: bool) -> anyhow::Result<Self> {
        let me = Self::blank(fsync)?;
        let data = me.data_dir();
        me.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        Ok(me)
    }

    /// A directory and a port for a cluster, with no data directory yet.
    fn blank(fsync: bool) -> anyhow::Result<Self> {
        let Some(bin) = find_bin_dir() else {
            bail!(
                "no database given and no local PostgreSQL installation (initdb, pg_ctl) found \
                 to start a throwaway one: set DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres"
            );
        };
        let dir = tempfile::Builder::new().prefix("outbox-pg-").tempdir()?;
        // initdb refuses to run as root; run the server as `postgres` then.
        let owner = if is_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let port = free_port()?;
        Ok(Self {
            bin,
            dir,
            port,
            owner,
            fsync,
            settings: Vec::new(),
        })
    }

    /// Starts the server (again) on the same port and data.
    pub fn start_server(&self) -> anyhow::Result<()> {
        let data = self.data_dir();
        let mut opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync={}",
            self.port,
            self.dir.path().display(),
            if self.fsync { "on" } else { "off" }
        );
        for s in &self.settings {
            opts.push_str(" -c ");
            opts.push_str(s);
        }
        let log = self.dir.path().join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                opts.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        )
    }

    /// Stops the server at once, cutting every connection (`-m immediate`:
    /// as close to a crash as a clean tool gets).
    pub fn stop_server(&self) -> anyhow::Result<()> {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        )
    }

    /// The connection URL.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the cluster lives.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `tool` of the installation, run as the cluster's owner.
    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
        let mut cmd = self.command(tool);
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = cmd.output().with_context(|| format!("cannot run {tool}"))?;
        if !out.status.success() {
            bail!(
                "{tool} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        let _ = self.stop_server();
        // TempDir's own drop removes the directory.
    }
}
fn find_bin_dir() -> Option<PathBuf> {
    // Through a symlink (`/usr/local/bin/initdb`) to the installation's
    // own directory, which holds its other tools too (pg_basebackup, psql).
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").is_file() && p.join("pg_ctl").is_file())
            .map(|p| match p.join("initdb").canonicalize() {
                Ok(real) => real.parent().map_or(p, Path::to_path_buf),
                Err(_) => p,
            })
    });
    on_path.or_else(|| {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("initdb").is_file())
            .collect();
        dirs.sort();
        dirs.pop()
    })
}

pub(crate) fn is_root() -> bool {
    // The owner of /proc/self is the effective user; no unsafe libc call needed.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

pub(crate) fn postgres_user() -> anyhow::Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0] == "postgres")
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .context("running as root, and there is no `postgres` user to run a throwaway PostgreSQL as; set DATABASE_URL")
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
