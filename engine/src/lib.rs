//! The sessionlog engine: the consumers of the log, on top of the store crate.
//!
//! `sessionlog_store` keeps the log (the `LogStore` API on redb, PostgreSQL or memory, the
//! replay driver, import and export); this crate reads and writes it:
//! - the projections every view is built from: [`requests`] (every request the model saw and
//!   its prefix reuse), [`meter`] (the token breakdown), [`show`] (the transcript),
//!   [`inspect`] (messages and surface at a seq), [`prompt`]'s history, [`audit`], [`diff`],
//!   and the `--json` [`documents`];
//! - the agent stack, writing only through `LogStore`: [`agent`] (the loop and the LLM
//!   adapters), [`prompt`], [`context`], [`compaction`];
//! - [`server`]: the HTTP service over `LogService`;
//! - [`demo`]: the main job as one function.
//!
//! The store crate's modules are re-exported under the paths the CLI uses (`store` is
//! `sessionlog_store::embedded`).
//!
//! ```
//! use sessionlog_engine::open::{open_store, Access, Location};
//! use sessionlog_engine::replay::SessionSource;
//! use sessionlog_engine::requests::{requests, RequestOptions};
//! use sessionlog_format::gen::{GenOptions, Generator};
//!
//! let dir = tempfile::tempdir()?;
//! let store = open_store(&Location::Redb(dir.path().join("s.redb")), Access::Write)?;
//! let mut generator = Generator::new(GenOptions { events: 200, seed: 3 });
//! let header = generator.header();
//! store.create_session(&header, false)?;
//! let mut next_seq = 0;
//! while let Some(batch) = generator.next_batch() {
//!     next_seq = store.append_events(&header.id, next_seq, batch)?.next_seq;
//! }
//! let source = SessionSource::Store { store: store.as_ref(), session: &header.id };
//! let report = requests(source, RequestOptions::default())?;
//! assert!(!report.requests.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod agent;
pub mod audit;
pub mod compaction;
pub mod context;
pub mod demo;
pub mod diff;
pub mod documents;
pub mod inspect;
pub mod meter;
pub mod prompt;
pub mod requests;
pub mod server;
pub mod show;

pub use error::Error;
/// The embedded redb store.
pub use sessionlog_store::embedded as store;
/// The store crate's modules, under the paths the operations and the CLI have always used.
pub use sessionlog_store::{
    cat, check, error, files, generate, log_service, log_store, mem_store, migrate, open, pg_store,
    publish, replay, salvage, seal, stdin, transfer, walk,
};
