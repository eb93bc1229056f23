-- Migration 7's `key_allowed`, the claim's filter with ordering on while it
-- was a plpgsql function: the claim has stated that filter in plain SQL
-- since, where the planner sees it (store/sql/mod.rs), and nothing calls
-- the function any more. Dropped, so the schema holds only what runs.
DROP FUNCTION IF EXISTS {schema}.key_allowed(text, text, int8, bytea, int8[], int8[]);
