//! The sessionlog log store: the bottom of the workspace, on the pure `format` and
//! `migrations` crates.
//!
//! - [`log_store::LogStore`]: the one storage API. Its backends are the embedded redb store
//!   ([`embedded::Store`]: a WAL, sealed zstd blocks, checkpoints, verify), PostgreSQL
//!   ([`pg_store::PgStore`], behind the `postgres` feature) and [`mem_store::MemStore`];
//!   [`open::open_store`] opens any of them by location.
//! - [`log_service::LogService`]: the async edge over any backend (group commit, tails, close).
//! - [`replay`]: the one replay driver, feeding a [`Projection`] from a log file of any
//!   version or a stored session of any backend.
//! - The file side of the log: [`files`] (opening logs, standard input), [`check`], [`cat`],
//!   [`generate`],
//!   [`migrate`] (the chain over files, with its proof), [`transfer`] (import, export),
//!   [`seal`], [`salvage`] and backup; [`publish`] is the one atomic publish.
//!
//! It knows nothing of prompts, agents or HTTP.
//!
//! ```
//! use sessionlog_store::{open_store, Access, AppendRequest, Location, LogService, LogStore};
//! use sessionlog_format::gen::{GenOptions, Generator};
//!
//! let dir = tempfile::tempdir()?;
//! let store = open_store(&Location::Redb(dir.path().join("s.redb")), Access::Write)?;
//! let generator = Generator::new(GenOptions { events: 40, seed: 1 });
//! let header = generator.header();
//! store.create_session(&header, false)?;
//! let events = generator.into_events();
//! let ack = store.append(AppendRequest {
//!     session: header.id.clone(),
//!     expected_next_seq: 0,
//!     events: events.clone(),
//! })?;
//! assert_eq!(ack.next_seq, events.len() as u64);
//! assert_eq!(store.read_range(&header.id, 0, u64::MAX)?, events);
//! // Tail it through the async service: every stored event, then each new one.
//! let runtime = tokio::runtime::Runtime::new()?;
//! let first = runtime.block_on(async {
//!     let service = LogService::new(store.clone());
//!     let mut tail = service.tail(&header.id, 0).await?;
//!     tail.next().await.transpose()
//! })?;
//! assert_eq!(first.as_ref(), events.first());
//! // And read back the messages the model saw.
//! let fold = store.fold_at(&header.id, None)?;
//! assert!(!fold.messages().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cat;
pub mod check;
pub mod embedded;
pub mod error;
pub(crate) mod facts;
pub mod files;
pub mod generate;
pub mod location;
pub mod log_service;
pub mod log_store;
pub mod mem_store;
pub mod migrate;
pub mod migrate_stored;
pub mod open;
#[cfg(feature = "postgres")]
pub mod pg_store;
pub mod publish;
pub mod replay;
pub mod salvage;
pub mod seal;
pub mod stdin;
pub mod transfer;
pub mod types;
pub mod verify;
pub mod walk;

pub use embedded::{AppendAck, AppendRequest, Head, Store, StoreError};
pub use error::Error;
pub use log_service::LogService;
pub use log_store::{LogStore, SessionInfo};
pub use open::{open_store, Access, Location};
pub use replay::SessionSource;
pub use sessionlog_format::projection::{Flow, Opening, Projection};
