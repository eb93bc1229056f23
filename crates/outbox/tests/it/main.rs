//! Every integration test of this crate, in one binary: one link, not one
//! per file. Each module is what a file under tests/ was (its name is the
//! filter: `cargo test -p outbox --test it MODULE`).

#[cfg(feature = "sqlx")] // both drivers, sqlx's included
mod enqueue;
mod properties;
mod upgrade;
