//! Integration tests of the `sessionlog` binary: the CLI.md contract, end to end.

mod check;
mod store;
mod support;
mod tidy;
