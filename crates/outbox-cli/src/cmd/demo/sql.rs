//! The demo's statements: its business table (`<schema>.demo_orders`) and
//! the counts it prints, rendered once per schema.

outbox::statements! {
    /// The demo's statements for one schema.
    pub(crate) struct DemoQueries {
        /// Demo: create the business table.
        create_orders = "CREATE TABLE IF NOT EXISTS {schema}.demo_orders ( \
               id BIGSERIAL PRIMARY KEY, order_no TEXT NOT NULL UNIQUE, \
               amount_cents BIGINT NOT NULL CHECK (amount_cents > 0), \
               status TEXT NOT NULL DEFAULT 'created', \
               created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        /// Demo: `$1 order_no, $2 int8 amount_cents` → `id`.
        insert_order = "INSERT INTO {schema}.demo_orders (order_no, amount_cents) \
             VALUES ($1, $2) RETURNING id",
        /// Demo: `(orders, outbox messages, published events)` counts.
        counts = "SELECT (SELECT count(*) FROM {schema}.demo_orders) AS orders, \
                (SELECT count(*) FROM {schema}.all_messages) AS messages, \
                (SELECT count(*) FROM {schema}.published_events) AS published",
        /// Demo: number of rows in `<schema>.messages` that are claimable or claimed.
        unsettled = "SELECT count(*) AS count FROM {schema}.messages \
              WHERE status IN ('pending', 'failed', 'processing')",
        /// Demo consumer's business effect: `$1 int8` order id.
        confirm_order = "UPDATE {schema}.demo_orders SET status = 'confirmed' WHERE id = $1",
    }
}
