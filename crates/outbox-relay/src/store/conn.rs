//! How every statement of the store reaches the database.
//!
//! **Unnamed statements.** Each statement is sent with its parameter types
//! as one unnamed Parse/Bind/Execute (`query_typed`), never as a named
//! prepared statement cached on the connection. Behind a transaction-mode
//! pooler (PgBouncer) consecutive statements of one client run on different
//! server connections, where a named statement is missing or, from another
//! client, already exists (`prepared statement "s1" already exists`); an
//! unnamed one lives only for its own round trip. It is also one round trip,
//! like a cached statement, and survives a migration that changes a table
//! under a running relay. The cost is a parse and plan per call, measured
//! in docs/performance.md.
//!
//! **Deadlines.** Every call on a [`Conn`] is bounded. A connection whose
//! peer stopped answering without closing (a partition, a dead host behind
//! a proxy that still answers TCP keepalives) would otherwise hold its
//! caller forever; past the deadline the call fails with
//! [`Error::DatabaseTimeout`] and the connection is dropped, not returned
//! to the pool, so the next call opens a fresh one. So is a connection to
//! a server that refused a write as read-only (`relay/read_only.rs`).

use crate::{Error, Result};
use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

/// A statement parameter: a value and the PostgreSQL type it is sent as.
pub(crate) trait Param: ToSql + Sync {
    /// The type named in the statement's Parse message.
    fn pg_type(&self) -> Type;
}

macro_rules! params {
    ($($t:ty => $one:ident, $many:ident;)*) => {$(
        impl Param for $t {
            fn pg_type(&self) -> Type { Type::$one }
        }
        impl Param for Option<$t> {
            fn pg_type(&self) -> Type { Type::$one }
        }
        impl Param for Vec<$t> {
            fn pg_type(&self) -> Type { Type::$many }
        }
        impl Param for Option<Vec<$t>> {
            fn pg_type(&self) -> Type { Type::$many }
        }
        impl Param for &[$t] {
            fn pg_type(&self) -> Type { Type::$many }
        }
        impl Param for Option<&[$t]> {
            fn pg_type(&self) -> Type { Type::$many }
        }
    )*};
}

params! {
    i32 => INT4, INT4_ARRAY;
    i64 => INT8, INT8_ARRAY;
    f64 => FLOAT8, FLOAT8_ARRAY;
    bool => BOOL, BOOL_ARRAY;
    String => TEXT, TEXT_ARRAY;
    &str => TEXT, TEXT_ARRAY;
    Cow<'_, str> => TEXT, TEXT_ARRAY;
    DateTime<Utc> => TIMESTAMPTZ, TIMESTAMPTZ_ARRAY;
    uuid::Uuid => UUID, UUID_ARRAY;
    serde_json::Value => JSONB, JSONB_ARRAY;
}

/// Bytes (a bucket bitmap) go as `bytea`, not as an array of numbers.
impl Param for Option<&[u8]> {
    fn pg_type(&self) -> Type {
        Type::BYTEA
    }
}

impl Param for &[u8] {
    fn pg_type(&self) -> Type {
        Type::BYTEA
    }
}

fn typed<'a>(params: &'a [&'a dyn Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|p| (*p as &(dyn ToSql + Sync), p.pg_type()))
        .collect()
}

/// `sql` with `params`, its rows; on any client (a transaction too).
pub(crate) async fn query<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&dyn Param],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    client.query_typed(sql, &typed(params)).await
}

/// `sql` with `params`, the rows it affected; on any client.
pub(crate) async fn execute<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&dyn Param],
) -> Result<u64, tokio_postgres::Error> {
    client.execute_typed(sql, &typed(params)).await
}

/// The one row `rows` must hold, as `query_one` would say it.
fn one(rows: Vec<Row>) -> Result<Row> {
    let n = rows.len();
    let mut rows = rows.into_iter();
    match (rows.next(), n) {
        (Some(r), 1) => Ok(r),
        _ => Err(Error::RowCount {
            expected: "one",
            got: n,
        }),
    }
}

/// At most one row.
fn opt(rows: Vec<Row>) -> Result<Option<Row>> {
    match rows.len() {
        0 | 1 => Ok(rows.into_iter().next()),
        n => Err(Error::RowCount {
            expected: "at most one",
            got: n,
        }),
    }
}

/// A pooled connection whose every call has a deadline.
pub(crate) struct Conn {
    obj: Option<Object>,
    deadline: Duration,
    /// Set when a call passed its deadline: the connection may be in the
    /// middle of a reply that never comes, so it must not be reused.
    broken: AtomicBool,
}

impl Conn {
    pub(crate) fn new(obj: Object, deadline: Duration) -> Self {
        Self {
            obj: Some(obj),
            deadline,
            broken: AtomicBool::new(false),
        }
    }

    fn client(&self) -> &tokio_postgres::Client {
        self.obj.as_ref().expect("present until drop")
    }

    async fn within<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.deadline, call).await {
            Ok(Err(e)) if e.is_read_only() => {
                // A server in recovery (a standby, or the old primary
                // back as one): a new connection may reach the primary,
                // given several hosts and target_session_attrs=read-write.
                self.broken.store(true, Ordering::Relaxed);
                Err(e)
            }
            Ok(r) => r,
            Err(_) => {
                self.broken.store(true, Ordering::Relaxed);
                Err(Error::DatabaseTimeout(self.deadline))
            }
        }
    }

    pub(crate) async fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        self.within(async { Ok(query(self.client(), sql, params).await?) })
            .await
    }

    pub(crate) async fn query_one(&self, sql: &str, params: &[&dyn Param]) -> Result<Row> {
        one(self.query(sql, params).await?)
    }

    pub(crate) async fn query_opt(&self, sql: &str, params: &[&dyn Param]) -> Result<Option<Row>> {
        opt(self.query(sql, params).await?)
    }

    pub(crate) async fn execute(&self, sql: &str, params: &[&dyn Param]) -> Result<u64> {
        self.within(async { Ok(execute(self.client(), sql, params).await?) })
            .await
    }

    /// A statement without parameters, as a simple query (`SELECT 1`).
    pub(crate) async fn simple(&self, sql: &str) -> Result<()> {
        let call = async { Ok(self.client().simple_query(sql).await.map(drop)?) };
        self.within(call).await
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.broken.load(Ordering::Relaxed) {
            if let Some(obj) = self.obj.take() {
                // Out of the pool: dropping the client closes the socket.
                drop(Object::take(obj));
            }
        }
    }
}
