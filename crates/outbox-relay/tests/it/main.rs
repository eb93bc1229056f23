//! Every integration test of this crate, in one binary: one link, not one
//! per file. Each module is what a file under tests/ was (its name is the
//! filter: `cargo test -p outbox-relay --test it MODULE`).

#[macro_use]
mod conformance;
mod admin;
mod archive;
mod bad_headers;
mod claim_floor;
mod dead_letters;
mod hostile_http;
mod hostile_rows;
mod insert_only_draft;
mod insert_only_relay;
mod ordering;
mod ordering_race;
mod properties;
mod publisher_amqp;
mod publisher_asynq;
mod publisher_http;
mod publisher_kafka;
mod publisher_mqtt;
mod publisher_nats;
mod publisher_postgres;
mod publisher_redis;
mod reaper;
mod relay;
mod relay_failures;
mod running;
mod support;
mod trace_context;
