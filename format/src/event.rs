//! The event envelope (spec 4): type, seq, time, data, and the surface metadata.

use std::fmt;

use serde::de::DeserializeSeed;
use serde_json::Value;

use crate::message::Message;
use crate::payload::*;

macro_rules! event_types {
    ( $( $variant:ident = $name:literal, )* ) => {
        /// An event type name. Names this build does not know are kept in `Other`.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum EventType {
            $( #[doc = concat!("`", $name, "`")] $variant, )*
            /// Any other name, kept verbatim.
            Other(Box<str>),
        }

        impl EventType {
            /// The type name as written in the log.
            pub fn as_str(&self) -> &str {
                match self {
                    $( EventType::$variant => $name, )*
                    EventType::Other(name) => name,
                }
            }

            /// Parses a type name; never fails.
            pub fn parse(name: &str) -> EventType {
                match name {
                    $( $name => EventType::$variant, )*
                    other => EventType::Other(other.into()),
                }
            }
        }
    };
}

event_types! {
    AgentPresetSelected = "agent-preset/selected",
    AgentInboxSpliced = "agent/inbox/spliced",
    ApprovalAsked = "approval/asked",
    ApprovalDecided = "approval/decided",
    ApprovalPolicy = "approval/policy",
    AssistantAttempt = "assistant/attempt",
    AssistantChunk = "assistant/chunk",
    AssistantMessage = "assistant/message",
    CommandDone = "command/done",
    CommandRun = "command/run",
    CompactionEnd = "compaction/end",
    CompactionPrune = "compaction/prune",
    CompactionStart = "compaction/start",
    CompactionSummary = "compaction/summary",
    DeliverablesPresented = "deliverables/presented",
    DeveloperMessage = "developer/message",
    FeedbackMessageDelete = "feedback/message-delete",
    FeedbackMessagePut = "feedback/message-put",
    FeedbackRecord = "feedback/record",
    ForkSessionSource = "fork/session-source",
    GoalChange = "goal/change",
    HookInvoked = "hook/invoked",
    HookResult = "hook/result",
    ImageOffload = "image/offload",
    LlmRetry = "llm/retry",
    LlmRetryStarted = "llm/retry-started",
    ModelSelection = "model/selection",
    PermissionPreset = "permission/preset",
    PlanMode = "plan/mode",
    RequestContext = "request/context",
    RequestHeader = "request/header",
    SandboxMode = "sandbox/mode",
    ScheduleChange = "schedule/change",
    DeliveryAccepted = "session-log-deepseek/delivery-accepted",
    SessionEndSeed = "session/end-seed",
    SessionTitle = "session/title",
    SessionTitleLlmRequest = "session/title-llm-request",
    StepEnd = "step/end",
    StepStart = "step/start",
    SubagentCatalog = "subagent/catalog",
    SubagentDescriptor = "subagent/descriptor",
    SubagentModelSelectionPolicy = "subagent/model-selection-policy",
    SystemMessage = "system/message",
    TeamMember = "team/member",
    TeamMessageDelivered = "team/message/delivered",
    TeamMessageQueued = "team/message/queued",
    TeamTask = "team/task",
    TodoWrite = "todo/write",
    ToolWorkflowAgentEnd = "tool-workflow/agent-end",
    ToolWorkflowAgentStart = "tool-workflow/agent-start",
    ToolWorkflowRunEnd = "tool-workflow/run-end",
    ToolWorkflowRunStart = "tool-workflow/run-start",
    ToolCall = "tool/call",
    ToolCodeDispatch = "tool/code-dispatch",
    ToolCodeDispatchStart = "tool/code-dispatch-start",
    ToolPtcDispatch = "tool/ptc-dispatch",
    ToolPtcDispatchStart = "tool/ptc-dispatch-start",
    ToolResult = "tool/result",
    TurnEnd = "turn/end",
    TurnStart = "turn/start",
    UserMessage = "user/message",
    WebDeepseekSearchLlmRequest = "web/deepseek-search-llm-request",
    SteeringMessage = "steering/message",
    CompactStart = "compact/start",
    CompactSummary = "compact/summary",
    CompactEnd = "compact/end",
    CompactPrune = "compact/prune",
    RequestHeaderDelta = "request/header-delta",
    ModeSet = "mode/set",
}

impl EventType {
    /// The surface types of V3 (spec 4): they carry `surfaceOp`, and only they may.
    pub fn is_surface_v3(&self) -> bool {
        matches!(
            self,
            EventType::SystemMessage
                | EventType::UserMessage
                | EventType::AssistantMessage
                | EventType::ToolResult
        )
    }

    /// The surface types of V4: the V3 ones and `developer/message` (dsh-v4.md 4.6).
    pub fn is_surface_v4(&self) -> bool {
        self.is_surface_v3() || *self == EventType::DeveloperMessage
    }

    /// The surface types before V3: user, assistant and tool only.
    pub fn is_surface_pre_v3(&self) -> bool {
        matches!(
            self,
            EventType::UserMessage | EventType::AssistantMessage | EventType::ToolResult
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event's `data`, typed for the core events and opaque for the rest. Typed payloads are
/// boxed so that an `Event` stays small (events are held by the million).
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    TurnStart(Box<TurnStart>),
    TurnEnd(Box<TurnEnd>),
    StepStart(Box<StepRef>),
    StepEnd(Box<StepRef>),
    SystemMessage(Box<SystemMessageData>),
    DeveloperMessage(Box<DeveloperMessageData>),
    UserMessage(Box<Message>),
    AssistantMessage(Box<AssistantMessageData>),
    AssistantAttempt(Box<AssistantAttemptData>),
    AssistantChunk(Box<AssistantChunkData>),
    ToolCall(Box<ToolCallData>),
    ToolResult(Box<ToolResultData>),
    RequestHeader(Box<RequestHeaderData>),
    RequestContext(Box<RequestContextData>),
    SessionEndSeed(Box<EndSeedData>),
    CompactionStart(Box<CompactionStartData>),
    CompactionSummary(Box<CompactionSummaryData>),
    CompactionPrune(Box<CompactionPruneData>),
    CompactionEnd(Box<CompactionEndData>),
    ImageOffload(Box<ImageOffloadData>),
    /// Every other type: the payload exactly as written.
    Other(Value),
}

impl EventData {
    /// The event type a typed payload belongs to; `None` for [`EventData::Other`].
    pub fn typed_kind(&self) -> Option<EventType> {
        Some(match self {
            EventData::TurnStart(_) => EventType::TurnStart,
            EventData::TurnEnd(_) => EventType::TurnEnd,
            EventData::StepStart(_) => EventType::StepStart,
            EventData::StepEnd(_) => EventType::StepEnd,
            EventData::SystemMessage(_) => EventType::SystemMessage,
            EventData::DeveloperMessage(_) => EventType::DeveloperMessage,
            EventData::UserMessage(_) => EventType::UserMessage,
            EventData::AssistantMessage(_) => EventType::AssistantMessage,
            EventData::AssistantAttempt(_) => EventType::AssistantAttempt,
            EventData::AssistantChunk(_) => EventType::AssistantChunk,
            EventData::ToolCall(_) => EventType::ToolCall,
            EventData::ToolResult(_) => EventType::ToolResult,
            EventData::RequestHeader(_) => EventType::RequestHeader,
            EventData::RequestContext(_) => EventType::RequestContext,
            EventData::SessionEndSeed(_) => EventType::SessionEndSeed,
            EventData::CompactionStart(_) => EventType::CompactionStart,
            EventData::CompactionSummary(_) => EventType::CompactionSummary,
            EventData::CompactionPrune(_) => EventType::CompactionPrune,
            EventData::CompactionEnd(_) => EventType::CompactionEnd,
            EventData::ImageOffload(_) => EventType::ImageOffload,
            EventData::Other(_) => return None,
        })
    }

    /// The message a surface payload carries: `data` itself for `user/message`, `data.message`
    /// for the other surface types.
    pub fn message(&self) -> Option<&Message> {
        match self {
            EventData::UserMessage(m) => Some(m),
            EventData::SystemMessage(d) => Some(&d.message),
            EventData::DeveloperMessage(d) => Some(&d.message),
            EventData::AssistantMessage(d) => Some(&d.message),
            EventData::ToolResult(d) => Some(&d.message),
            _ => None,
        }
    }

    /// The payload as a JSON value, exactly as a row writes it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(crate::row::DataRef(self))
            .expect("a payload of JSON values always converts")
    }

    /// Decodes a payload of `kind` from a JSON value, typed as a row would decode it (the
    /// current shapes, never the V0 legacy ones).
    pub fn from_value(kind: &EventType, value: Value) -> Result<EventData, String> {
        let seed = DataSeed {
            kind,
            legacy: false,
        };
        seed.deserialize(value).map_err(|e| e.to_string())
    }

    /// `(turn, step)` of the payloads that name a step.
    pub fn turn_step(&self) -> Option<(u64, u64)> {
        match self {
            EventData::StepStart(d) | EventData::StepEnd(d) => Some((d.turn, d.step)),
            EventData::SystemMessage(d) => Some((d.turn, d.step)),
            EventData::DeveloperMessage(d) => Some((d.turn, d.step)),
            EventData::AssistantMessage(d) => Some((d.turn, d.step)),
            EventData::AssistantAttempt(d) => Some((d.turn, d.step)),
            EventData::AssistantChunk(d) => Some((d.turn, d.step)),
            EventData::ToolCall(d) => Some((d.turn, d.step)),
            EventData::ToolResult(d) => Some((d.turn, d.step)),
            _ => None,
        }
    }
}

/// Decodes `data` for a known type straight from the input, without an intermediate tree.
///
/// With `legacy` (V0 and V1 logs), the types whose payload had an older shape before the
/// current wrappers (a flat `assistant/message` or `tool/result` without `message`, a
/// compaction event without `compactionId`) are read into a tree first: the current shape is
/// then decoded typed, an older one is kept opaque for the V0 -> V1 edge to normalise.
pub(crate) struct DataSeed<'a> {
    pub(crate) kind: &'a EventType,
    pub(crate) legacy: bool,
}

/// The member whose absence marks a V0 payload of `kind` as an older shape.
fn legacy_marker(kind: &EventType) -> Option<&'static str> {
    match kind {
        EventType::AssistantMessage | EventType::ToolResult => Some("message"),
        EventType::CompactionStart | EventType::CompactionSummary | EventType::CompactionEnd => {
            Some("compactionId")
        }
        _ => None,
    }
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = EventData;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<EventData, D::Error> {
        use serde::Deserialize;
        if let Some(marker) = legacy_marker(self.kind).filter(|_| self.legacy) {
            let value = Value::deserialize(d)?;
            if let Err(reason) = crate::json::check_lossless(&value) {
                return Err(serde::de::Error::custom(reason));
            }
            if value.get(marker).is_none() {
                return Ok(EventData::Other(value));
            }
            let seed = DataSeed {
                kind: self.kind,
                legacy: false,
            };
            return seed.deserialize(value).map_err(serde::de::Error::custom);
        }
        Ok(match self.kind {
            EventType::TurnStart => EventData::TurnStart(Box::new(TurnStart::deserialize(d)?)),
            EventType::TurnEnd => EventData::TurnEnd(Box::new(TurnEnd::deserialize(d)?)),
            EventType::StepStart => EventData::StepStart(Box::new(StepRef::deserialize(d)?)),
            EventType::StepEnd => EventData::StepEnd(Box::new(StepRef::deserialize(d)?)),
            EventType::SystemMessage => {
                EventData::SystemMessage(Box::new(SystemMessageData::deserialize(d)?))
            }
            EventType::DeveloperMessage => {
                // A malformed payload is kept as it is, so that V4 row admission refuses it
                // with dsh's texts (`v4_rows::check_row`) instead of a decoder message.
                let value = Value::deserialize(d)?;
                if let Err(reason) = crate::json::check_lossless(&value) {
                    return Err(serde::de::Error::custom(reason));
                }
                match DeveloperMessageData::deserialize(&value) {
                    Ok(data) => EventData::DeveloperMessage(Box::new(data)),
                    Err(_) => EventData::Other(value),
                }
            }
            EventType::UserMessage => EventData::UserMessage(Box::new(Message::deserialize(d)?)),
            EventType::AssistantMessage => {
                EventData::AssistantMessage(Box::new(AssistantMessageData::deserialize(d)?))
            }
            EventType::AssistantAttempt => {
                EventData::AssistantAttempt(Box::new(AssistantAttemptData::deserialize(d)?))
            }
            EventType::AssistantChunk => {
                EventData::AssistantChunk(Box::new(AssistantChunkData::deserialize(d)?))
            }
            EventType::ToolCall => EventData::ToolCall(Box::new(ToolCallData::deserialize(d)?)),
            EventType::ToolResult => {
                EventData::ToolResult(Box::new(ToolResultData::deserialize(d)?))
            }
            EventType::RequestHeader => {
                EventData::RequestHeader(Box::new(RequestHeaderData::deserialize(d)?))
            }
            EventType::RequestContext => {
                EventData::RequestContext(Box::new(RequestContextData::deserialize(d)?))
            }
            EventType::SessionEndSeed => {
                EventData::SessionEndSeed(Box::new(EndSeedData::deserialize(d)?))
            }
            EventType::CompactionStart => {
                EventData::CompactionStart(Box::new(CompactionStartData::deserialize(d)?))
            }
            EventType::CompactionSummary => {
                EventData::CompactionSummary(Box::new(CompactionSummaryData::deserialize(d)?))
            }
            EventType::CompactionPrune => {
                EventData::CompactionPrune(Box::new(CompactionPruneData::deserialize(d)?))
            }
            EventType::CompactionEnd => {
                EventData::CompactionEnd(Box::new(CompactionEndData::deserialize(d)?))
            }
            EventType::ImageOffload => {
                EventData::ImageOffload(Box::new(ImageOffloadData::deserialize(d)?))
            }
            _ => {
                let value = Value::deserialize(d)?;
                if let Err(reason) = crate::json::check_lossless(&value) {
                    return Err(serde::de::Error::custom(reason));
                }
                EventData::Other(value)
            }
        })
    }
}

/// The surface effect of a surface event (spec 4 rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceOp {
    /// Push the event onto the surface.
    Append,
    /// Replace the inclusive span from `start_seq` to `end_seq`, in surface order, by the
    /// event. V3 writes `{op, startSeq, endSeq}`; V0 to V2 wrote `{op, start, end}`.
    Replace { start_seq: u64, end_seq: u64 },
}

/// One logical event of a session log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: u64,
    /// Epoch milliseconds; may repeat, and normalized recordings hold 0.
    pub time: i64,
    pub kind: EventType,
    pub data: EventData,
    /// `ignorable: true`; only log-only events may carry it.
    pub ignorable: bool,
    /// Provenance, expanded from its range encoding (spec 3.4).
    pub source_event_seqs: Option<Vec<u64>>,
    pub surface_op: Option<SurfaceOp>,
}

impl Event {
    /// Builds an event whose type follows from its typed payload. `Other` payloads need
    /// [`Event::other`].
    pub fn new(seq: u64, time: i64, data: EventData) -> Event {
        let Some(kind) = data.typed_kind() else {
            panic!("Event::new needs a typed payload; use Event::other")
        };
        Event {
            seq,
            time,
            kind,
            data,
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
        }
    }

    /// Builds an event with an opaque payload.
    pub fn other(seq: u64, time: i64, kind: EventType, data: Value) -> Event {
        Event {
            seq,
            time,
            kind,
            data: EventData::Other(data),
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
        }
    }

    /// Sets the surface op (builder style, for writers and tests).
    pub fn with_surface_op(mut self, op: SurfaceOp) -> Event {
        self.surface_op = Some(op);
        self
    }

    /// Sets the provenance list (builder style).
    pub fn with_sources(mut self, seqs: Vec<u64>) -> Event {
        self.source_event_seqs = Some(seqs);
        self
    }

    /// The message this event shows the model, when it is a surface payload.
    pub fn message(&self) -> Option<&Message> {
        self.data.message()
    }
}

// An event is held by the million in memory: keep it small.
const _: () = assert!(std::mem::size_of::<Event>() <= 176);
