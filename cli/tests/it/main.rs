//! Integration tests of the `sessionlog` binary: the CLI.md contract, end to end.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod audit;
mod backends;
mod catalog;
mod check;
mod compact;
mod import;
mod inputs;
mod lock;
mod migrate;
mod prompt;
mod requests;
mod run;
mod seal;
mod serve;
mod show;
mod store;
mod support;
mod tidy;
mod v4;
