//! Integration tests of the format crate: the dsh conformance corpus, round trips, torn
//! tails and property tests.

mod corpus;
mod fuzz_seeds;
mod hostile;
mod legacy;
mod props;
mod roundtrip;
mod support;
mod torn;
mod writer;
