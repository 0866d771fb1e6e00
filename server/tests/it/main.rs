//! Integration tests of the HTTP service on every backend: the endpoints, tails, limits under
//! hostile clients, shutdown, the console's views, and the console in a browser.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod console;
// The store suite's helpers, shared (one copy): not every one is used here.
#[allow(dead_code)]
#[path = "../../../store/tests/it/harness.rs"]
mod harness;
mod server;
#[allow(dead_code)]
#[path = "../../../store/tests/it/support.rs"]
mod support;
mod views;
mod webdriver;
