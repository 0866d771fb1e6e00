//! The V0 -> V1 edge (issue #5): bounded normalisations of released V0 logs.
//!
//! Skeleton: the stage lands with issue #5.

/// Why the V0 -> V1 edge refused a source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum V0Reason {
    #[error("format v0 to v1 cannot safely transform unclassified event {kind}")]
    UnclassifiedEvent { kind: String },
}
