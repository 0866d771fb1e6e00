//! The sessionlog engine: everything that touches files, and the operations the CLI runs.
//!
//! `format` is pure; this crate opens files and drives it. Today it holds the file layer
//! ([`files`]), `check` ([`check`]), `cat` ([`cat`]) and the synthetic generator's file
//! writer ([`generate`]). The store, the folds and verify join it with the store issue.
//!
//! ```no_run
//! use sessionlog_engine::check::{check_file, CheckOptions};
//!
//! let report = check_file("session.v3.jsonl".as_ref(), CheckOptions::default());
//! assert!(report.ok);
//! ```

pub mod cat;
pub mod check;
pub mod error;
pub mod files;
pub mod generate;

pub use error::Error;
