//! Adjacent version edges of the dsh session-log format (vN -> vN+1), pure and streaming.
//!
//! A log older than the current version reaches it through a chain of adjacent edges, one
//! [`Stage`] per edge. The [`Catalog`] holds exactly one edge per step from its lowest version
//! to V3 and checks that when it is built; [`Catalog::plan`] gives the [`Chain`] for a stored
//! version. Today the catalog holds the V2 -> V3 edge only (issue #4); V0 -> V1 and V1 -> V2
//! arrive with issue #5 as two more stages.
//!
//! - [`v2_to_v3`]: the V2 -> V3 stage of spec 10: the system head after the first step, head
//!   replacements for prompt changes, reference remapping, the PTC and preset renames and
//!   canonical envelopes. It refuses, with dsh's texts, every source it cannot convert without
//!   reordering.
//! - [`proof`]: the request-equivalence proof (spec 10.8), folding source and target side by
//!   side with `format`'s `SessionFold`.
//! - [`migrate_v2_to_v3`]: stage, V3 admission of the output and proof over a whole log.
//!
//! Nothing here does I/O: events in, events out. The caller reads and writes the files and
//! places a [`Refusal`] in its file (for a V2 file, the physical line is `seq + 2`).

pub mod catalog;
pub mod error;
pub mod migrator;
mod proof;
pub mod v0_to_v1;
pub mod v1_to_v2;
pub mod v2_to_v3;

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
