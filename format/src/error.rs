//! Errors of the format crate: faults found in a log, and read failures.

use std::fmt;
use std::io;

/// The rule a fault broke. Stable names, used in `--json` output and by callers that match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// The line is not valid JSON, or is not lossless JSON (spec 12.1 rule 2).
    Json,
    /// A record exceeds a size limit.
    TooLarge,
    /// The header record (spec 3.3).
    Header,
    /// The envelope keys and values (spec 4 rule 1, 3.4).
    Envelope,
    /// Seqs are dense from 0 (spec 3.4 rule 4).
    SeqGap,
    /// `surfaceOp` presence and shape (spec 4 rules 2 to 5).
    SurfaceOp,
    /// `sourceEventSeqs` (spec 4 rule 6, 3.4 range encoding).
    SourceSeqs,
    /// The typed payload of the event type (spec 4 rules 7, 9, 10).
    Payload,
    /// A payload member that must be an array of content blocks (spec 13.1, relations.md).
    ContentMember,
    /// A payload member that must be a non-negative safe integer (a seq, position or count).
    IntegerMember,
    /// A payload member that must be a string (a text).
    StringMember,
    /// A payload member that must be a boolean.
    BooleanMember,
    /// The message shape (spec 4 rule 8).
    MessageShape,
    /// V3 row admission (spec 11 codec).
    RowAdmission,
    /// An unknown type without `ignorable: true` (spec 9).
    UnknownEvent,
    /// The surface transition (spec 7.2).
    Surface,
    /// The protected system head (spec 7.2 step 6.5, 11 rules 3 to 7).
    HeadProtection,
    /// A `system/message` outside its own open step (spec 11 rule 2).
    SystemStep,
    /// A record cut short at the end of the file (spec 3.2, 3.5).
    TornTail,
    /// A corrupt zstd frame (spec 3.2).
    Frame,
    /// An event that needs a message projection the fold lacks (spec 6.4, 7.2 step 3).
    Projection,
}

impl Rule {
    /// The rule's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Json => "json",
            Rule::TooLarge => "too-large",
            Rule::Header => "header",
            Rule::Envelope => "envelope",
            Rule::SeqGap => "seq-gap",
            Rule::SurfaceOp => "surface-op",
            Rule::SourceSeqs => "source-event-seqs",
            Rule::Payload => "payload",
            Rule::ContentMember => "content-member",
            Rule::IntegerMember => "integer-member",
            Rule::StringMember => "string-member",
            Rule::BooleanMember => "boolean-member",
            Rule::MessageShape => "message-shape",
            Rule::RowAdmission => "row-admission",
            Rule::UnknownEvent => "unknown-event",
            Rule::Surface => "surface",
            Rule::HeadProtection => "head-protection",
            Rule::SystemStep => "system-step",
            Rule::TornTail => "torn-tail",
            Rule::Frame => "frame",
            Rule::Projection => "projection",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A rule violation, with the place it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Physical line number, 1-based; the header is line 1.
    pub line: u64,
    /// Byte offset of the start of the line in the decompressed stream.
    pub offset_bytes: u64,
    /// The seq of the event the line holds, when known.
    pub seq: Option<u64>,
    pub rule: Rule,
    /// The spec-worded message, without the place.
    pub message: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        write!(f, ": {} [{}]", self.message, self.rule)
    }
}

impl std::error::Error for Fault {}

/// A violation found by a stateless or stateful rule, before the place is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub message: String,
}

impl Violation {
    pub fn new(rule: Rule, message: impl Into<String>) -> Violation {
        Violation {
            rule,
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message, self.rule)
    }
}

impl std::error::Error for Violation {}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The header names a version newer than this build (spec 9); checked before anything else.
    #[error("{message}")]
    NewerVersion {
        id: String,
        found: u64,
        supported: u64,
        message: String,
    },
    /// A fault that the recovery mode does not forgive.
    #[error("{0}")]
    Fault(Fault),
    /// The underlying reader failed.
    #[error("read failed")]
    Io(#[source] io::Error),
}

impl ReadError {
    /// The fault, when the error is one.
    pub fn fault(&self) -> Option<&Fault> {
        match self {
            ReadError::Fault(f) => Some(f),
            _ => None,
        }
    }
}
