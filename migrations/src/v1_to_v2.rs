//! The V1 -> V2 edge (issue #5): chunk folding into embedded streams and dense remapping.
//!
//! Skeleton: the stage lands with issue #5.

/// Why the V1 -> V2 edge refused a source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum V1Reason {
    #[error("format v1 to v2 cannot safely transform unclassified event {kind}")]
    UnclassifiedEvent { kind: String },
}
