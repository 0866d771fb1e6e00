//! Compaction (spec 13): one summarisation call replaces an early span of the surface by a checkpoint.
//!
//! - [`range`]: [`range::select_compactable_range`], which span to shadow: it anchors at the
//!   first non-system node (node 0 is never shadowed), keeps a recent tail and never splits a
//!   tool call from its result;
//! - [`input`]: [`input::build_summarization_input`], the summariser's request: the last
//!   routed request's prefix replayed verbatim (header tools, the derived head, the shadowed
//!   nodes in surface order) plus one trailing instruction, so the call extends the warm
//!   provider cache instead of missing it;
//! - [`events`]: the event sequence `compaction/start` -> `compaction/summary` -> checkpoint
//!   `user/message` (the replace) -> `compaction/end`;
//! - [`run`]: [`run::compact`], one whole compaction through the agent's adapter, and
//!   [`run::compact_region`], a manual compaction of a chosen mid-surface region;
//! - [`trigger`]: the loop's hooks: pressure before a step, recovery after an overflow.

pub mod events;
pub mod input;
pub mod range;
pub mod run;
pub mod trigger;

pub use input::{build_summarization_input, SummarizationInput, COMPACTION_INSTRUCTION};
pub use range::{
    select_compactable_range, select_region, surface_nodes, CompactRange, RangeNode, RegionError,
};
pub use run::{compact, compact_region, CompactionError, CompactionOptions, CompactionReport};

/// The estimated context of the fold's head: surface plus tools (spec 14).
pub fn meter_total(fold: &sessionlog_format::SessionFold) -> u64 {
    sessionlog_engine::meter::ContextMeter::from_fold(fold)
        .breakdown()
        .total()
}
