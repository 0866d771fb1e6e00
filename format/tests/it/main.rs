//! Integration tests of the format crate: the dsh conformance corpus, round trips, torn
//! tails and property tests.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod corpus;
mod fuzz_seeds;
mod hostile;
mod legacy;
mod props;
mod roundtrip;
mod support;
mod torn;
mod v4;
mod writer;
