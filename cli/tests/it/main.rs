//! Integration tests of the `sessionlog` binary: the CLI.md contract, end to end.

mod check;
mod support;
