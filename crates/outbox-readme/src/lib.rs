//! The workspace README's Rust snippets, compiled as doctests so that what a
//! newcomer copies compiles as written (`cargo test --doc -p outbox-readme`).
//! Snippets that need a database are `no_run`: compiled, not run.

/// The README, as rustdoc sees it (see `build.rs`).
#[cfg(doctest)]
#[doc = include_str!(concat!(env!("OUT_DIR"), "/README.md"))]
#[derive(Debug)]
pub struct Readme;
