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
    /// V3 row admission (spec 11 codec); V4 retired syntax and system fields (dsh-v4.md 4.5).
    RowAdmission,
    /// A V4 message slot without a producer-owned source kind (dsh-v4.md 4.3).
    ProducerSource,
    /// The tool-role message of a V4 `tool/result` (dsh-v4.md 4.2).
    ToolRole,
    /// A V4 fork-generated not-started result that is not the exact form (dsh-v4.md 4.2).
    ForkResult,
    /// A V4 `developer/message` payload on its own (dsh-v4.md 4.4).
    DeveloperMessage,
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
    // The relationship rules (spec 12.2; texts in `spec/relations.md`).
    /// `turn/start` while a turn is open, or with the wrong number (spec 12.2 turns 1).
    TurnStart,
    /// `turn/end` of a turn that is not the open one (spec 12.2 turns 2).
    TurnEndUnmatched,
    /// `turn/end` while a step is open (spec 12.2 turns 2).
    TurnEndOpenStep,
    /// `turn/end` or `step/end` with an advertised or started call unresolved.
    UnresolvedToolCall,
    /// `step/start` outside the open turn, inside an open step, or with the wrong number.
    StepStart,
    /// A step event outside the open step (spec 12.2 turns 6).
    OpenStep,
    /// `request/header`, `request/context` or a PTC dispatch outside an open turn.
    OpenTurn,
    /// `turn/start` or `turn/end` inside an open compaction not proven stale.
    CompactionCrossing,
    /// A `tool-call` block repeats an advertised call id.
    ToolCallRepeated,
    /// `tool/call` with no advertised call of that id, name and arguments.
    ToolCallUnmatched,
    /// An appended `tool/result` for a call with no lifecycle.
    ToolResultUnmatched,
    /// A result for a call that never started, other than the exact repair.
    ToolResultNotStarted,
    /// A `tool/result` replace outside any turn.
    ToolResultReplaceOutsideTurn,
    /// `llm/retry` not at the open step or the last closed one.
    RetryStep,
    /// `llm/retry` provider differs from the open `request/header`'s.
    RetryProvider,
    /// `llm/retry` number not the next one of its chain.
    RetryNumber,
    /// `retryId` changes within one policy chain.
    RetryIdChanged,
    /// One `retryId` used by two policy chains.
    RetryIdReused,
    /// `llm/retry-started` with no earlier scheduled attempt.
    RetryStartedUnpaired,
    /// `llm/retry-started` at another turn or step than scheduled.
    RetryStartedStep,
    /// `llm/retry-started` a second time for one attempt.
    RetryStartedRepeated,
    /// `session/title.messageSeqs` empty for a non-user title, or not for a user title.
    TitleUserSeqs,
    /// `messageSeqs` naming anything but earlier human `user/message` events.
    TitleSources,
    /// `session/title-llm-request.messages` not the one title message.
    TitleRequestMessages,
    /// `command/run` repeats a `commandId`.
    CommandRepeated,
    /// `command/done` with no earlier run.
    CommandDoneUnmatched,
    /// `command/done.sourceEventSeq` without success, or naming a `command/*` event.
    CommandSourceSeq,
    /// A PTC dispatch changes the `rootCallId` of its `subCallId`.
    PtcRootChanged,
    /// A PTC `parentCallId` that is neither the root nor a child of it.
    PtcParent,
    /// A second PTC dispatch start for one `subCallId`.
    PtcStartRepeated,
    /// A PTC settle with no unsettled start.
    PtcSettleUnmatched,
    /// A PTC settle whose root, parent, name or arguments differ from its start.
    PtcSettleMismatch,
    /// A current-generation delivery marker naming another session outside an inherited prefix.
    DeliverySession,
    /// `compaction/start` while one is open.
    CompactionOverlap,
    /// A compaction's owner turn is neither the open turn nor `null` outside turns.
    CompactionTurn,
    /// A compaction event or checkpoint with no open compaction of its id.
    CompactionUnmatched,
    /// A second `compaction/summary` in one transaction.
    CompactionSummaryRepeated,
    /// `shadowedSeqs` not an exact current surface span.
    CompactionSpan,
    /// A V4 `developer/message` whose `headerSeq` does not bind its tool additions to an
    /// earlier `request/header` (dsh-v4.md 4.4).
    DeveloperHeader,
    /// A V4 inherited `session/end-seed` in an unseeded session, or a seeded V4 session with
    /// none (dsh-v4.md 6, `restoreReleasedV4Artifact` step 4).
    InheritedMarker,
    /// `compaction/end` with another owner turn.
    CompactionOwnerChanged,
    /// A successful `compaction/end` without a summary.
    CompactionSummaryMissing,
}

impl Rule {
    /// Whether the rule is one of the relationship validator's (spec 12.2).
    pub fn is_relational(self) -> bool {
        RELATIONAL_RULES.contains(&self)
    }

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
            Rule::ProducerSource => "producer-source",
            Rule::ToolRole => "tool-role",
            Rule::ForkResult => "fork-result",
            Rule::DeveloperMessage => "developer-message",
            Rule::UnknownEvent => "unknown-event",
            Rule::Surface => "surface",
            Rule::HeadProtection => "head-protection",
            Rule::SystemStep => "system-step",
            Rule::TornTail => "torn-tail",
            Rule::Frame => "frame",
            Rule::Projection => "projection",
            Rule::TurnStart => "turn-start",
            Rule::TurnEndUnmatched => "turn-end-unmatched",
            Rule::TurnEndOpenStep => "turn-end-open-step",
            Rule::UnresolvedToolCall => "unresolved-tool-call",
            Rule::StepStart => "step-start",
            Rule::OpenStep => "open-step",
            Rule::OpenTurn => "open-turn",
            Rule::CompactionCrossing => "compaction-crossing",
            Rule::ToolCallRepeated => "tool-call-repeated",
            Rule::ToolCallUnmatched => "tool-call-unmatched",
            Rule::ToolResultUnmatched => "tool-result-unmatched",
            Rule::ToolResultNotStarted => "tool-result-not-started",
            Rule::ToolResultReplaceOutsideTurn => "tool-result-replace-outside-turn",
            Rule::RetryStep => "retry-step",
            Rule::RetryProvider => "retry-provider",
            Rule::RetryNumber => "retry-number",
            Rule::RetryIdChanged => "retry-id-changed",
            Rule::RetryIdReused => "retry-id-reused",
            Rule::RetryStartedUnpaired => "retry-started-unpaired",
            Rule::RetryStartedStep => "retry-started-step",
            Rule::RetryStartedRepeated => "retry-started-repeated",
            Rule::TitleUserSeqs => "title-user-seqs",
            Rule::TitleSources => "title-sources",
            Rule::TitleRequestMessages => "title-request-messages",
            Rule::CommandRepeated => "command-repeated",
            Rule::CommandDoneUnmatched => "command-done-unmatched",
            Rule::CommandSourceSeq => "command-source-seq",
            Rule::PtcRootChanged => "ptc-root-changed",
            Rule::PtcParent => "ptc-parent",
            Rule::PtcStartRepeated => "ptc-start-repeated",
            Rule::PtcSettleUnmatched => "ptc-settle-unmatched",
            Rule::PtcSettleMismatch => "ptc-settle-mismatch",
            Rule::DeliverySession => "delivery-session",
            Rule::CompactionOverlap => "compaction-overlap",
            Rule::CompactionTurn => "compaction-turn",
            Rule::CompactionUnmatched => "compaction-unmatched",
            Rule::CompactionSummaryRepeated => "compaction-summary-repeated",
            Rule::CompactionSpan => "compaction-span",
            Rule::DeveloperHeader => "developer-header",
            Rule::InheritedMarker => "inherited-marker",
            Rule::CompactionOwnerChanged => "compaction-owner-changed",
            Rule::CompactionSummaryMissing => "compaction-summary-missing",
        }
    }
}

/// Every relationship rule, in the order of `spec/relations.md`.
pub const RELATIONAL_RULES: &[Rule] = &[
    Rule::TurnStart,
    Rule::TurnEndUnmatched,
    Rule::TurnEndOpenStep,
    Rule::UnresolvedToolCall,
    Rule::StepStart,
    Rule::OpenStep,
    Rule::OpenTurn,
    Rule::CompactionCrossing,
    Rule::ToolCallRepeated,
    Rule::ToolCallUnmatched,
    Rule::ToolResultUnmatched,
    Rule::ToolResultNotStarted,
    Rule::ToolResultReplaceOutsideTurn,
    Rule::RetryStep,
    Rule::RetryProvider,
    Rule::RetryNumber,
    Rule::RetryIdChanged,
    Rule::RetryIdReused,
    Rule::RetryStartedUnpaired,
    Rule::RetryStartedStep,
    Rule::RetryStartedRepeated,
    Rule::TitleUserSeqs,
    Rule::TitleSources,
    Rule::TitleRequestMessages,
    Rule::CommandRepeated,
    Rule::CommandDoneUnmatched,
    Rule::CommandSourceSeq,
    Rule::PtcRootChanged,
    Rule::PtcParent,
    Rule::PtcStartRepeated,
    Rule::PtcSettleUnmatched,
    Rule::PtcSettleMismatch,
    Rule::DeliverySession,
    Rule::CompactionOverlap,
    Rule::CompactionTurn,
    Rule::CompactionUnmatched,
    Rule::CompactionSummaryRepeated,
    Rule::CompactionSpan,
    Rule::CompactionOwnerChanged,
    Rule::CompactionSummaryMissing,
    Rule::DeveloperHeader,
    Rule::InheritedMarker,
];

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
