//! Integration tests of the engine: the store's admission, durability and folds.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod admission;
mod agent;
mod audit;
mod backends;
mod blocks;
mod chain;
mod compaction;
mod concurrency;
mod context;
mod faultpos;
mod faults;
mod import;
mod inputs;
mod kill;
mod loop_admission;
mod loopback;
mod model;
mod mutants;
mod prompt;
mod requests;
mod roundtrip;
mod run_props;
mod server;
mod service;
mod snapshot;
mod support;
mod verify;
mod wal;
