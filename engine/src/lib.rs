//! The sessionlog engine: the operations on the log's sources, on top of the store and the
//! projections.
//!
//! `sessionlog_store` keeps the log (the `LogStore` API on redb, PostgreSQL or memory, the
//! replay driver, import and export); `sessionlog_projections` folds it (requests, the wire
//! body, the token meter, the transcript). This crate runs them over files and stores:
//! [`inspect`] (messages and surface at a seq, `check --db`), [`stored`] (the views of a stored
//! session in store terms), [`audit`], [`diff`], the `--json` [`documents`], and [`demo`] (the
//! main job as one function). The agent stack (`sessionlog-agent`) and the HTTP service
//! (`sessionlog-server`) sit on top of it.
//!
//! The store's and the projections' modules are re-exported under the paths the CLI uses
//! (`store` is `sessionlog_store::embedded`).
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

pub mod audit;
pub mod demo;
pub mod diff;
pub mod documents;
pub mod inspect;
pub mod stored;

pub use error::Error;
/// The projections, under the paths the agent, the server and the CLI use.
pub use sessionlog_projections::{meter, requests, show, sources, wire};
/// The embedded redb store.
pub use sessionlog_store::embedded as store;
/// The store crate's modules, under the paths the operations and the CLI have always used.
pub use sessionlog_store::{
    cat, check, error, files, generate, log_service, log_store, mem_store, migrate, migrate_stored,
    open, pg_store, publish, replay, salvage, seal, stdin, transfer, walk,
};
