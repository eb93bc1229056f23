//! The demo's statements: its business table (`<schema>.demo_orders`) and
//! the counts it prints, rendered once per schema.

use outbox::sql::render;
use outbox::Schema;

/// The demo's statements for one schema.
#[derive(Debug, Clone)]
pub(crate) struct DemoQueries {
    /// Demo: create the business table.
    pub(crate) create_orders: String,
    /// Demo: `$1 order_no, $2 int8 amount_cents` → `id`.
    pub(crate) insert_order: String,
    /// Demo: `(orders, outbox messages, published events)` counts.
    pub(crate) counts: String,
    /// Demo: number of rows in `<schema>.messages` that are claimable or claimed.
    pub(crate) unsettled: String,
    /// Demo consumer's business effect: `$1 int8` order id.
    pub(crate) confirm_order: String,
}

impl DemoQueries {
    /// Renders every statement for `schema`.
    pub(crate) fn new(schema: &Schema) -> Self {
        let r = |t: &str| render(t, schema);
        Self {
            create_orders: r("CREATE TABLE IF NOT EXISTS {schema}.demo_orders ( \
                   id BIGSERIAL PRIMARY KEY, order_no TEXT NOT NULL UNIQUE, \
                   amount_cents BIGINT NOT NULL CHECK (amount_cents > 0), \
                   status TEXT NOT NULL DEFAULT 'created', \
                   created_at TIMESTAMPTZ NOT NULL DEFAULT now())"),
            insert_order: r("INSERT INTO {schema}.demo_orders (order_no, amount_cents) \
                 VALUES ($1, $2) RETURNING id"),
            counts: r(
                "SELECT (SELECT count(*) FROM {schema}.demo_orders) AS orders, \
                        (SELECT count(*) FROM {schema}.all_messages) AS messages, \
                        (SELECT count(*) FROM {schema}.published_events) AS published",
            ),
            unsettled: r("SELECT count(*) AS count FROM {schema}.messages \
                  WHERE status IN ('pending', 'failed', 'processing')"),
            confirm_order: r("UPDATE {schema}.demo_orders SET status = 'confirmed' WHERE id = $1"),
        }
    }
}
