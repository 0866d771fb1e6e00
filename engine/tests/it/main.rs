//! Integration tests of the engine: the agent loop, prompt, compaction, the projections over
//! files and stores, and the server.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod agent;
mod audit;
mod backend_views;
// The store suite's helpers, shared (one copy): not every one is used here.
mod compaction;
mod context;
#[allow(dead_code)]
#[path = "../../../store/tests/it/harness.rs"]
mod harness;
mod inputs;
mod loop_admission;
mod loopback;
mod prompt;
mod requests;
mod run_props;
mod server;
#[allow(dead_code)]
#[path = "../../../store/tests/it/support.rs"]
mod support;
