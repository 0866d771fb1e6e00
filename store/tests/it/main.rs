//! Integration tests of the store: admission, durability, the WAL and blocks, verify, import
//! and export, the backends (redb, in memory, PostgreSQL) and the async service.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod admission;
mod backends;
mod blocks;
mod chain;
mod concurrency;
mod faultpos;
mod faults;
pub mod harness;
mod import;
mod kept;
mod kill;
mod model;
mod mutants;
mod roundtrip;
mod service;
mod snapshot;
pub mod support;
mod verify;
mod versions;
mod wal;
