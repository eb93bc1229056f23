use super::{private::Sealed, Executor};
use crate::message::Columns;
use crate::{Enqueued, Error, Result};
use sqlx::{Executor as _, PgConnection, Row};

impl Sealed for &mut PgConnection {}

// sqlx prepares and caches statements per connection by itself.
impl Executor for &mut PgConnection {
    async fn insert_one(self, sql: &str, mut c: Columns) -> Result<Enqueued> {
        let event_id = c.event_id[0];
        let id: i64 = sqlx::query_scalar(sql)
            .bind(event_id)
            .bind(c.event_type.swap_remove(0))
            .bind(c.event_version[0])
            .bind(c.aggregate_type.swap_remove(0))
            .bind(c.aggregate_id.swap_remove(0))
            .bind(c.topic.swap_remove(0))
            .bind(sqlx::types::Json(c.payload.swap_remove(0)))
            .bind(sqlx::types::Json(c.headers.swap_remove(0)))
            .fetch_one(&mut *self)
            .await
            .map_err(Error::from_sqlx)?;
        Ok(Enqueued { id, event_id })
    }

    async fn insert_many(self, sql: &str, c: Columns) -> Result<Vec<Enqueued>> {
        let event_ids = c.event_id.clone();
        let rows = sqlx::query(sql)
            .bind(c.event_id)
            .bind(c.event_type)
            .bind(c.event_version)
            .bind(c.aggregate_type)
            .bind(c.aggregate_id)
            .bind(c.topic)
            .bind(
                c.payload
                    .into_iter()
                    .map(sqlx::types::Json)
                    .collect::<Vec<_>>(),
            )
            .bind(
                c.headers
                    .into_iter()
                    .map(sqlx::types::Json)
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut *self)
            .await
            .map_err(Error::from_sqlx)?;
        let returned = rows
            .iter()
            .map(|r| {
                Ok(Enqueued {
                    id: r.try_get("id")?,
                    event_id: r.try_get("event_id")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(Error::from_sqlx)?;
        Ok(super::in_input_order(&event_ids, returned.into_iter()))
    }

    async fn execute_text(self, sql: &str, a: &str, b: &str) -> Result<u64> {
        let done = sqlx::query(sql)
            .bind(a)
            .bind(b)
            .execute(&mut *self)
            .await
            .map_err(Error::from_sqlx)?;
        Ok(done.rows_affected())
    }

    async fn execute_script(self, sql: &str) -> Result<()> {
        // A multi-statement script goes through the simple query protocol.
        self.execute(sqlx::raw_sql(sql))
            .await
            .map_err(Error::from_sqlx)?;
        Ok(())
    }
}
