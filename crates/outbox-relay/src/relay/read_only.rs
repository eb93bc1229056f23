//! A database that refuses writes: a standby, a server still in recovery,
//! or one set `default_transaction_read_only`. Every claim, settle, lease
//! renewal and LISTEN fails there with SQLSTATE 25006, and each would warn
//! on its own (a pipeline, the reaper, the buckets' heartbeat, the
//! listener: seven warnings a second). The relay says it once, with what to
//! do, and goes on retrying each at its usual pause: after a failover the
//! same URL may reach a promoted server, and with
//! `target_session_attrs=read-write` a fresh connection finds the new
//! primary (the store drops a connection that was refused, see
//! `store/conn.rs`). Nothing is written to such a server: it cannot be.

use crate::Error;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the warning of the current spell was given.
#[derive(Debug, Default)]
pub(crate) struct ReadOnly {
    warned: AtomicBool,
}

impl ReadOnly {
    /// Whether `e` is the refusal of a read-only server; the first one of
    /// a spell is logged as the warning. A caller logs other errors itself.
    pub(crate) fn refused(&self, e: &Error) -> bool {
        if !e.is_read_only() {
            return false;
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error = %crate::error_chain(e),
                "the database is read-only (a standby, or a server in recovery): nothing is claimed \
                 or settled until it accepts writes, retrying; give the primary's address, or every \
                 host with target_session_attrs=read-write"
            );
        } else {
            tracing::debug!(error = %crate::error_chain(e), "the database is still read-only");
        }
        true
    }

    /// A write succeeded: the spell is over, and the next one warns again.
    pub(crate) fn writable(&self) {
        if self.warned.swap(false, Ordering::Relaxed) {
            tracing::info!("the database accepts writes again");
        }
    }
}
