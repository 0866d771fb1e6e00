//! The migrations crate's integration tests: one binary, one module per area.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod audit;
mod catalog;
mod corpus;
mod fuzz_seeds;
mod generated;
mod legacy;
mod rewrite;
mod support;
mod v0_to_v1;
mod v1_to_v2;
mod v3_to_v4;
mod vectors;
mod worked;
