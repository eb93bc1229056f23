//! A primary with one synchronous streaming standby, for failover tests:
//! both throwaway clusters on their own loopback ports, the standby cloned
//! by `pg_basebackup -R` and promoted by `pg_ctl promote`.

use crate::EmbeddedPostgres;
use anyhow::{bail, Context};
use std::time::{Duration, Instant};

/// A running primary and its synchronous standby.
#[derive(Debug)]
pub struct Pair {
    /// Accepts writes until it is stopped.
    pub primary: EmbeddedPostgres,
    /// In recovery, streaming from the primary, until [`Pair::promote`].
    pub standby: EmbeddedPostgres,
}

impl Pair {
    /// Starts the primary, clones it into the standby and waits until the
    /// standby streams as the synchronous one: from then on a commit the
    /// primary acknowledges is on the standby too.
    pub fn start() -> anyhow::Result<Self> {
        let primary = EmbeddedPostgres::start(false)?;
        let standby = EmbeddedPostgres::blank(false)?;
        let data = standby.data_dir();
        let port = primary.port().to_string();
        standby.run(
            "pg_basebackup",
            &[
                "-h".as_ref(),
                "127.0.0.1".as_ref(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-D".as_ref(),
                data.as_os_str(),
                // Writes standby.signal and primary_conninfo.
                "-R".as_ref(),
                "-X".as_ref(),
                "stream".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        standby.start_server()?;
        // Synchronous only now, and only on the primary: the standby's copy
        // of the configuration must not wait for a standby of its own once
        // it is promoted.
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")?;
        primary.psql("SELECT pg_reload_conf()")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state =
                primary.psql("SELECT string_agg(sync_state, ',') FROM pg_stat_replication")?;
            if state == "sync" {
                break;
            }
            if Instant::now() > deadline {
                bail!("the standby did not become synchronous (replication: {state:?})");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Self { primary, standby })
    }

    /// Both servers in one URL, libpq's multi-host form, where a connection
    /// takes the first that accepts writes
    /// (`target_session_attrs=read-write`): what a client of a failover
    /// pair is given.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port(),
            self.standby.port()
        )
    }

    /// Promotes the standby and waits until it accepts writes.
    pub fn promote(&self) -> anyhow::Result<()> {
        let data = self.standby.data_dir();
        self.standby.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-w".as_ref(),
                "promote".as_ref(),
            ],
        )
    }
}

impl EmbeddedPostgres {
    /// Runs `sql` through `psql` on this server's socket and returns its
    /// output, trimmed: for set-up steps, before any client library is in play.
    pub fn psql(&self, sql: &str) -> anyhow::Result<String> {
        let port = self.port.to_string();
        let out = self
            .command("psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-U", "postgres"])
            .arg("-h")
            .arg(self.dir.path())
            .args(["-p", &port, "-d", "postgres", "-c", sql])
            .output()
            .context("cannot run psql")?;
        if !out.status.success() {
            bail!(
                "psql failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}
