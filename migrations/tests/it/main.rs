//! The migrations crate's integration tests: one binary, one module per area.

mod audit;
mod catalog;
mod corpus;
mod rewrite;
mod support;
mod vectors;
mod worked;
