//! Typed refusals of the migration edges and of the catalog that chains them.

use sessionlog_format::FormatVersion;

/// A migration stage refused its source. Refusal leaves the source untouched; no edge ever
/// reorders events or relaxes an invariant to force a conversion (spec 10.6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// The edge that refused.
    pub from: FormatVersion,
    pub to: FormatVersion,
    /// The seq of the offending event in the edge's input, when one event is to blame. For a
    /// V2 file read as written, its physical line is `seq + 2` (see [`Refusal::v2_line`]).
    pub seq: Option<u64>,
    pub reason: Reason,
}

impl Refusal {
    /// A refusal of the V2 -> V3 edge.
    pub fn v2_to_v3(seq: Option<u64>, reason: Reason) -> Refusal {
        Refusal {
            from: FormatVersion::V2,
            to: FormatVersion::V3,
            seq,
            reason,
        }
    }

    /// A refusal of a whole chain from `from` to `to` (the proof, the target's admission);
    /// `seq` is a source seq.
    pub fn chain(
        from: FormatVersion,
        to: FormatVersion,
        seq: Option<u64>,
        reason: Reason,
    ) -> Refusal {
        Refusal {
            from,
            to,
            seq,
            reason,
        }
    }

    /// A refusal of the V0 -> V1 edge; `seq` is a V0 seq.
    pub fn v0_to_v1(seq: Option<u64>, reason: impl Into<Reason>) -> Refusal {
        Refusal {
            from: FormatVersion::V0,
            to: FormatVersion::V1,
            seq,
            reason: reason.into(),
        }
    }

    /// A refusal of the V1 -> V2 edge; `seq` is a V1 seq.
    pub fn v1_to_v2(seq: Option<u64>, reason: impl Into<Reason>) -> Refusal {
        Refusal {
            from: FormatVersion::V1,
            to: FormatVersion::V2,
            seq,
            reason: reason.into(),
        }
    }

    /// The physical line of the offending event in a V2 (or V3) file: the header is line 1
    /// and seqs are dense from 0.
    pub fn v2_line(&self) -> Option<u64> {
        self.seq.map(|seq| seq + 2)
    }
}

/// Why an edge refused. The texts of the V2 -> V3 reasons are dsh's own wording where the
/// spec quotes it (spec 10.3, 10.6); the others are ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Reason {
    #[error("format v2 source events must be dense")]
    NotDense { expected: u64, found: u64 },
    #[error("format v2 source header is not a released v2 header: {detail}")]
    InvalidHeader { detail: String },
    #[error("format v2 to v3 cannot safely transform unclassified event {kind}")]
    UnclassifiedEvent { kind: String },
    #[error("format v2 {kind} has unexpected field {field}")]
    UnexpectedField { kind: String, field: &'static str },
    #[error("format v2 {kind} requires surfaceOp")]
    MissingSurfaceOp { kind: String },
    #[error("format v2 {kind} payload {detail}")]
    Payload { kind: String, detail: String },
    #[error("format v2 to v3 cannot safely transform unclassified message source {source_kind}")]
    UnclassifiedSource { source_kind: String },
    #[error("format v2 to v3 cannot safely transform unclassified message content {block}")]
    UnclassifiedContent { block: String },
    #[error("source message id collides with a generated system message id")]
    SourceIdCollision { id: String },
    #[error("generated system message id collides with an existing message id")]
    GeneratedIdCollision { id: String },
    #[error(
        "format v2 surface before first step cannot acquire a system head without changing \
         chronology"
    )]
    SurfaceBeforeFirstStep,
    #[error(
        "format v2 changed request prompt outside an open step cannot retain source chronology"
    )]
    PromptOutsideStep,
    #[error("format v2 inherited end-seed marker in an unseeded source")]
    InheritedMarkerUnseeded,
    #[error("format v2 seeded source has no inherited end-seed marker")]
    InheritedMarkerMissing,
    #[error("format v2 delivery marker claims target format v3")]
    DeliveryClaimsV3,
    #[error("current-generation delivery marker names the wrong Session")]
    DeliveryWrongSession { session_id: String },
    #[error("format v2 {field} references seq {target} that has no earlier mapping")]
    UnmappedReference { field: &'static str, target: u64 },
    #[error("migration source is not a valid log of its version: {detail}")]
    InvalidSource { detail: String },
    #[error("migration produced an invalid {to} log: {detail}")]
    InvalidOutput { to: FormatVersion, detail: String },
    #[error(
        "migration changed the request at source seq {source_seq}: derived messages differ \
         first at index {message_idx}"
    )]
    RequestChanged { source_seq: u64, message_idx: usize },
    #[error("the stage received an event after finish")]
    Finished,
    /// The relationship validator (spec 12.2) refused an edge's output, as dsh refuses it
    /// inside its migration chain; `seq` is the output seq.
    #[error(
        "Session migration from {from} to {to} refuses the transformed artifact: {message} \
         [{rule}]"
    )]
    Relationship {
        from: FormatVersion,
        to: FormatVersion,
        seq: u64,
        rule: sessionlog_format::Rule,
        message: String,
    },
    /// A refusal of the V0 -> V1 edge (its own texts live with the edge).
    #[error(transparent)]
    V0ToV1(#[from] crate::v0_to_v1::V0Reason),
    /// A refusal of the V1 -> V2 edge.
    #[error(transparent)]
    V1ToV2(#[from] crate::v1_to_v2::V1Reason),
    /// A refusal of the V3 -> V4 edge.
    #[error(transparent)]
    V3ToV4(#[from] crate::v3_to_v4::V3Reason),
}

/// Why a catalog could not be built or could not plan a chain (spec 9, chain integrity).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    #[error("the catalog holds no edge")]
    Empty,
    #[error("edge {from} -> {to} is not adjacent")]
    NotAdjacent {
        from: FormatVersion,
        to: FormatVersion,
    },
    #[error("the catalog holds two edges from {from}")]
    Duplicate { from: FormatVersion },
    #[error("the catalog has no edge from {missing}")]
    Gap { missing: FormatVersion },
    #[error("the catalog ends at {last}, not at the current version {current}")]
    Incomplete {
        last: FormatVersion,
        current: FormatVersion,
    },
    #[error("stored Session uses newer format v{found}; this build writes v{current}")]
    Newer { found: u64, current: u64 },
    #[error("this build migrates only up to {newest}, not to {target}")]
    NoTarget {
        target: FormatVersion,
        newest: FormatVersion,
    },
    #[error(
        "stored Session uses format {found}, older than the supported {lowest}, and this build \
         ships no upgrade path for it"
    )]
    NoUpgradePath {
        found: FormatVersion,
        lowest: FormatVersion,
    },
}
