//! Integration tests of the `sessionlog` binary: the CLI.md contract, end to end.

mod check;
mod migrate;
mod store;
mod support;
mod tidy;
