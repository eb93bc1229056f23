//! The scenarios behind `outbox bench`: every figure is measured against a
//! reference in the same run, each scenario in a fresh schema (dropped
//! afterwards), through the real engine and the PostgreSQL publisher. The
//! `outbox` command only parses the flags, draws the bar and prints.
//!
//! # Layout
//! - [`sql`]: every statement of the bench ([`BenchQueries`]): preloads, the
//!   reference algorithms on a seed-shaped table, the checks and probes.
//! - `drain`: `bench drain` / `baseline` — [`Algorithm`]s
//!   draining one preloaded backlog ([`drain`], [`drain_spec`]); the pieces
//!   every scenario shares (fresh schema, [`drop_leftover_schemas`], preload, the exactly-once check,
//!   [`wait_until_settled`], [`median`], [`peak_rss_bytes`]).
//! - `ordering`: `bench ordering` — its [`Case`]s ([`measure`]) and
//!   [`RATIOS`] with their targets; [`drain_process`] (the `outbox relay`
//!   process, launch to last `sent_at`) and [`hot_table_bytes_per_message`].
//! - `latency`: `bench latency` ([`latency`], commit → publish percentiles)
//!   and `bench idle` ([`idle_queries_per_second`]).
//! - `produce`: `bench produce` ([`produce`] of each of [`PRODUCE_CASES`]),
//!   the library against a hand-written INSERT
//!   ([`library_over_hand_insert`]).
//! - `soak`: `bench soak` ([`soak`]), a large backlog slice by slice, with a
//!   REPEATABLE READ transaction held open or not; [`median_run`].
//! - `progress`: [`Progress`] for whoever draws a bar, and [`Counting`], the
//!   publisher wrapper that counts what the relay published.

mod drain;
mod latency;
mod ordering;
mod produce;
mod progress;
mod soak;
pub mod sql;

pub use drain::{
    drain, drain_spec, drop_leftover_schemas, median, peak_rss_bytes, wait_until_settled,
    Algorithm, DrainResult, DrainSpec,
};
pub use latency::{idle_queries_per_second, latency, Latency};
pub use ordering::{
    drain_process, hot_table_bytes_per_message, measure, Case, CaseSet, OrderingParams, Ratio,
    RATIOS,
};
pub use produce::{
    library_over_hand_insert, produce, produce_key, ProduceMode, ProduceParams, ProduceResult,
    PRODUCE_CASES,
};
pub use progress::{Counting, Progress};
pub use soak::{median_run, soak, Soak, SoakParams, SoakSlice};
pub use sql::BenchQueries;
