//! Pure codecs for dsh session logs (format versions V0 to V4).
//!
//! This crate turns bytes into typed events and back. It is what every other sessionlog crate
//! reads and writes through; it is not a store, a migrator or a CLI.
//!
//! - [`LogReader`] streams a log: it detects `.jsonl.zstd` by its magic, reads the header,
//!   refuses a newer version before anything else, expands V0/V1 packed rows, and yields
//!   [`Event`]s that have passed the admission rules of the log's version. [`Recovery`]
//!   chooses between the spec's `strict` and `recoverable` policies.
//! - [`Event`] is the envelope; [`EventData`] holds typed payloads for the core events and an
//!   opaque JSON value for the rest. Every member this build does not know is kept in an
//!   `extra` map, so decode then encode drops nothing.
//! - [`Admission`] is the stateful rule set (surface transition, protected head, system steps);
//!   [`rules::check_event`] is the stateless one. Readers, writers, the migrator and the engine
//!   all go through them.
//! - [`LogWriter`] writes a header and batches, raw or one zstd frame per batch.
//!
//! It does no I/O beyond `std::io::Read` and `Write`: no files, no clock, no async.
//!
//! ```
//! use sessionlog_format::{read_log, ReadOptions};
//!
//! let text = concat!(
//!     r#"{"type":"session","version":3,"id":"s","createdAt":0,"isSeeded":false,"delegationDepth":0}"#, "\n",
//!     r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#, "\n",
//! );
//! let log = read_log(text.as_bytes(), ReadOptions::default()).unwrap();
//! assert_eq!(log.events.len(), 1);
//! assert_eq!(log.events[0].kind.as_str(), "turn/start");
//! ```

pub mod admission;
pub mod binary;
pub mod block;
pub mod budget;
pub mod error;
pub mod event;
pub mod fold;
pub mod frame;
pub mod gaps;
pub mod gen;
pub mod header;
mod json;
pub mod members;
pub mod message;
pub mod payload;
pub mod pieces;
pub mod projection;
pub mod reader;
pub mod record;
pub mod relations;
pub mod row;
pub mod rules;
pub mod seq_map;
pub mod seq_ranges;
pub mod skim;
pub mod stream;
mod strip;
pub mod surface;
pub mod tokens;
mod utf8;
pub mod v4_rows;
pub mod version;
mod words;
pub mod writer;

pub use admission::Admission;
pub use error::{Fault, ReadError, Rule, Violation};
pub use event::{Event, EventData, EventType, SurfaceOp};
pub use fold::SessionFold;
pub use gaps::Gaps;
pub use header::SessionHeader;
pub use json::{check_lossless, Extra, JSON_DEPTH_MAX, SAFE_INTEGER_MAX};
pub use message::{ContentBlock, Message, Source};
pub use pieces::Pieces;
pub use reader::{
    read_log, FrameSource, Log, LogReader, ReadOptions, Recovery, SnapshotMode,
    PARALLEL_CHUNK_BYTES,
};
pub use version::{FormatVersion, FORMAT_VERSION_CURRENT, FORMAT_VERSION_NEWEST};
pub use writer::{Compression, LogWriter, WriteError, WriterOptions};
