//! Integration tests of the agent stack: the loop against the replay provider and a loopback
//! DeepSeek server, prompt assembly and history, context, compaction.

// Test code: helpers unwrap (a failure is the test failing), and items are `pub` to the
// crate's modules only.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod agent;
mod compaction;
mod context;
mod loop_admission;
mod loopback;
mod prompt;
mod run_props;
// The store suite's helpers, shared (one copy): not every one is used here.
#[allow(dead_code)]
#[path = "../../../store/tests/it/support.rs"]
mod support;
