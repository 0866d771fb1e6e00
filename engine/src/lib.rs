//! The sessionlog engine: everything that touches files, and the operations the CLI runs.
//!
//! `format` is pure; this crate opens files and drives it:
//! - [`store::Store`]: the embedded store on redb: checksummed, hash-chained records, atomic
//!   batch appends with admission, warm folds with persisted checkpoints, and `verify`;
//! - [`service::StoreHandle`]: the async edge: one writer task that group-commits appends,
//!   reads on the blocking pool, and tails;
//! - [`files`], [`check`], [`cat`], [`generate`], [`inspect`], [`transfer`]: one function per
//!   CLI command.
//!
//! ```no_run
//! use sessionlog_engine::check::{check_file, CheckOptions};
//!
//! let report = check_file("session.v3.jsonl".as_ref(), CheckOptions::default());
//! assert!(report.ok);
//! ```

pub mod agent;
pub mod audit;
pub mod cat;
pub mod check;
pub mod compaction;
pub mod context;
pub mod demo;
pub mod diff;
pub mod documents;
pub mod error;
pub mod files;
pub mod generate;
pub mod inspect;
pub mod log_service;
pub mod log_store;
pub mod mem_store;
pub mod meter;
pub mod migrate;
pub mod open;
pub mod pg_store;
pub mod prompt;
pub mod publish;
pub mod replay;
pub mod requests;
pub mod salvage;
pub mod seal;
pub mod server;
pub mod show;
pub mod stdin;
pub mod store;
pub mod transfer;
pub mod walk;

pub use error::Error;
