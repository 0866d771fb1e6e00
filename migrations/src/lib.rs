//! Adjacent version edges of the dsh session-log format (vN -> vN+1), pure and streaming.
//!
//! A log older than the current version reaches it through a chain of adjacent edges, one
//! [`Stage`] per edge. The [`Catalog`] holds exactly one edge per step from V0 to V4 and
//! checks that when it is built; [`Catalog::plan`] gives the [`Chain`] for a stored version.
//!
//! - [`v0_to_v1`]: the closed V0 inventory and the bounded legacy normalisations.
//! - [`v1_to_v2`]: top-level chunks folded into embedded streams, dense seqs, the inherited
//!   marker.
//! - [`v2_to_v3`]: the V2 -> V3 stage of spec 10: the system head after the first step, head
//!   replacements for prompt changes, reference remapping, the PTC and preset renames and
//!   canonical envelopes. It refuses, with dsh's texts, every source it cannot convert without
//!   reordering.
//! - [`v3_to_v4`]: the V3 -> V4 edge of dsh-v4.md 5: tool results lifted into tool messages,
//!   plugin sources renamed to producer kinds, unknown events and content tags moved into the
//!   `plugin:` namespace, the evidenced interrupted `turn/end`, and catalog completion.
//! - [`Migrator`]: one streaming migration through the planned chain, with V3 admission of
//!   the output and the request-equivalence proof (spec 10.8, over every edge) as events pass.
//!
//! Nothing here does I/O: events in, events out. The caller reads and writes the files and
//! places a [`Refusal`] in its file (the refusal names a source seq).
//!
//! ```
//! use sessionlog_format::gen::{GenOptions, Generator};
//! use sessionlog_format::FormatVersion;
//! use sessionlog_migrations::{Catalog, Migrator, MigratorOptions};
//!
//! let options = GenOptions { events: 200, seed: 1 };
//! let mut source = Generator::for_version(options, FormatVersion::V0).unwrap();
//! let catalog = Catalog::released();
//! let (mut migrator, header) =
//!     Migrator::new(&catalog, source.header(), MigratorOptions::default()).unwrap();
//! assert_eq!(header.version, Some(3));
//! let mut v3 = Vec::new();
//! while let Some(batch) = source.next_batch() {
//!     for event in batch {
//!         migrator.push(event, &mut v3).unwrap();
//!     }
//! }
//! let summary = migrator.finish(&mut v3).unwrap();
//! assert!(summary.requests_proved.unwrap() > 0);
//! ```

pub mod catalog;
pub mod error;
mod inventory;
pub mod migrator;
mod proof;
pub mod v0_to_v1;
pub mod v1_to_v2;
pub mod v2_to_v3;
pub mod v3_to_v4;

pub use catalog::{Catalog, Chain, EdgeSpec, Finish, Stage, StageOptions};
pub use error::{CatalogError, Reason, Refusal};
pub use migrator::{Migrator, MigratorError, MigratorOptions, Summary};
pub use sessionlog_format::FormatVersion;
pub use v0_to_v1::V0ToV1;
pub use v1_to_v2::{migrate_v1_to_v2, unpack_stream, UnpackError, V1Reason, V1ToV2};
pub use v2_to_v3::{
    migrate_v2_to_v3, migrate_v2_to_v3_unproved, migrate_v2_to_v3_with, system_message_id,
    Migrated, V2ToV3,
};
pub use v3_to_v4::{
    event_as_v4, producer_kind, ChildFact, V3Reason, V3ToV4, RELEASED_V3_EVENT_TYPES,
};
