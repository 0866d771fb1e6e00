//! The projections of a session log: pure folds over its events, on the format only.
//!
//! - [`requests`](mod@requests): every settled model call rebuilt from the log, with its prefix over the
//!   previous request and why the prefix broke;
//! - [`wire`]: a rebuilt request as the DeepSeek chat-completions wire body;
//! - [`meter`](mod@meter): the spec-14 context breakdown (system, messages, tools) at each request;
//! - [`show`](mod@show): the human transcript as data;
//! - [`sources`]: how the views name a message's source.
//!
//! Each is a `Projection` (`sessionlog_format::projection`); the functions that run one over a
//! whole session take any `Replay` source (a file of any version or a stored session of any
//! backend, through `sessionlog_store::SessionSource`), so nothing here reads a file or a
//! database: `.ci/run` fails if this crate pulls tokio, redb, reqwest, axum or postgres.
//!
//! ```
//! use sessionlog_format::gen::{GenOptions, Generator};
//! use sessionlog_format::projection::{Flow, Opening, Projection, Replay};
//! use sessionlog_format::{Event, SessionHeader};
//! use sessionlog_projections::{requests, tokens, RequestOptions};
//!
//! /// A session held in memory, as a replay source.
//! struct InMemory(SessionHeader, Vec<Event>);
//!
//! impl Replay for &InMemory {
//!     type Error = String;
//!     fn replay<P: Projection>(self, open: impl FnOnce(&Opening<'_>) -> P) -> Result<P, String> {
//!         let mut projection = open(&Opening { header: &self.0, snapshot: false });
//!         for event in &self.1 {
//!             let flow = projection.push(event.clone().into()).map_err(|e| e.to_string())?;
//!             if flow == Flow::Stop {
//!                 break;
//!             }
//!         }
//!         Ok(projection)
//!     }
//! }
//!
//! let generator = Generator::new(GenOptions { events: 300, seed: 5 });
//! let header = generator.header();
//! let events: Vec<Event> = generator.into_events();
//! let session = InMemory(header, events);
//! let report = requests(&session, RequestOptions::default())?;
//! let meter = tokens(&session)?;
//! assert_eq!(meter.requests.len(), report.requests.len());
//! # Ok::<(), String>(())
//! ```

pub mod meter;
pub mod requests;
pub mod show;
pub mod sources;
pub mod wire;

pub use meter::{tokens, TokensFold, TokensReport};
pub use requests::{requests, RequestAnalyzer, RequestOptions, RequestReport, RequestRow};
pub use show::{show, ShowOptions, Transcript, TranscriptBuilder};
