//! Integration tests of the engine: the projections over files and stores (requests, audit,
//! the views on every backend) and the inputs they accept.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod audit;
mod backend_views;
// The store suite's helpers, shared (one copy): not every one is used here.
#[allow(dead_code)]
#[path = "../../../store/tests/it/harness.rs"]
mod harness;
mod inputs;
mod requests;
#[allow(dead_code)]
#[path = "../../../store/tests/it/support.rs"]
mod support;
