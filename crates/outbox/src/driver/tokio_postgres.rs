use super::{private::Sealed, Executor};
use crate::message::Columns;
use crate::{Enqueued, Error, Result};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;

impl<C: GenericClient + Sync> Sealed for &C {}

// `query_typed` sends the parameter types with the statement, so a single
// enqueue is one round trip without a prepared statement cached per
// connection (which would break behind transaction-mode PgBouncer).
impl<C: GenericClient + Sync> Executor for &C {
    async fn insert_one(self, sql: &str, c: Columns) -> Result<Enqueued> {
        let params: [(&(dyn ToSql + Sync), Type); 8] = [
            (&c.event_id[0], Type::UUID),
            (&c.event_type[0], Type::TEXT),
            (&c.event_version[0], Type::INT4),
            (&c.aggregate_type[0], Type::TEXT),
            (&c.aggregate_id[0], Type::TEXT),
            (&c.topic[0], Type::TEXT),
            (&c.payload[0], Type::JSONB),
            (&c.headers[0], Type::JSONB),
        ];
        let row = self
            .query_typed_one(sql, &params)
            .await
            .map_err(Error::from_tokio_postgres)?;
        // Checked reads: a table altered under the library is an error
        // naming the column, not a panic in the caller's transaction.
        Ok(Enqueued {
            id: row.try_get("id").map_err(Error::from_tokio_postgres)?,
            event_id: c.event_id[0],
        })
    }

    async fn insert_many(self, sql: &str, c: Columns) -> Result<Vec<Enqueued>> {
        let params: [(&(dyn ToSql + Sync), Type); 8] = [
            (&c.event_id, Type::UUID_ARRAY),
            (&c.event_type, Type::TEXT_ARRAY),
            (&c.event_version, Type::INT4_ARRAY),
            (&c.aggregate_type, Type::TEXT_ARRAY),
            (&c.aggregate_id, Type::TEXT_ARRAY),
            (&c.topic, Type::TEXT_ARRAY),
            (&c.payload, Type::JSONB_ARRAY),
            (&c.headers, Type::JSONB_ARRAY),
        ];
        let rows = self
            .query_typed(sql, &params)
            .await
            .map_err(Error::from_tokio_postgres)?;
        let returned = rows
            .iter()
            .map(|r| {
                Ok(Enqueued {
                    id: r.try_get("id")?,
                    event_id: r.try_get("event_id")?,
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(Error::from_tokio_postgres)?;
        Ok(super::in_input_order(&c.event_id, returned.into_iter()))
    }

    async fn execute_text(self, sql: &str, a: &str, b: &str) -> Result<u64> {
        self.execute_typed(sql, &[(&a, Type::TEXT), (&b, Type::TEXT)])
            .await
            .map_err(Error::from_tokio_postgres)
    }

    async fn execute_script(self, sql: &str) -> Result<()> {
        self.batch_execute(sql)
            .await
            .map_err(Error::from_tokio_postgres)
    }
}
