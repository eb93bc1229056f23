//! The connection types `enqueue`, the inbox and `migrate` accept.
//!
//! [`Executor`] is implemented for `&C` where `C` is a tokio-postgres
//! `GenericClient` (a `Client` or a `Transaction`), and for `&mut PgConnection`
//! of sqlx (which a `&mut *tx` of a `sqlx::Transaction` gives). The core
//! types never name a driver, so an application on another driver version
//! only loses the feature, not the API.

#[cfg(feature = "sqlx")]
mod sqlx;
#[cfg(feature = "tokio-postgres")]
mod tokio_postgres;

use crate::message::Columns;
use crate::{Enqueued, Result};
use std::future::Future;

/// A connection or transaction of a supported driver. Implemented by this
/// crate only; its methods are internal.
pub trait Executor: Send + private::Sealed {
    #[doc(hidden)]
    fn insert_one(self, sql: &str, row: Columns) -> impl Future<Output = Result<Enqueued>> + Send;
    #[doc(hidden)]
    fn insert_many(
        self,
        sql: &str,
        rows: Columns,
    ) -> impl Future<Output = Result<Vec<Enqueued>>> + Send;
    #[doc(hidden)]
    fn execute_text(self, sql: &str, a: &str, b: &str) -> impl Future<Output = Result<u64>> + Send;
    #[doc(hidden)]
    fn execute_script(self, sql: &str) -> impl Future<Output = Result<()>> + Send;
}

pub(crate) mod private {
    pub trait Sealed {}
}

/// PostgreSQL does not promise that `INSERT ... SELECT FROM unnest ...
/// RETURNING` returns rows in input order; we know every event_id, so put
/// the results back in the caller's order.
#[cfg(any(feature = "tokio-postgres", feature = "sqlx"))]
fn in_input_order(
    event_ids: &[uuid::Uuid],
    returned: impl Iterator<Item = Enqueued>,
) -> Vec<Enqueued> {
    let by_event: std::collections::HashMap<_, _> = returned.map(|e| (e.event_id, e.id)).collect();
    event_ids
        .iter()
        .map(|event_id| Enqueued {
            id: by_event[event_id],
            event_id: *event_id,
        })
        .collect()
}
