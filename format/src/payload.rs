//! Typed payloads (`data`) of the core events (spec 5.1, 8.1, 13.1).
//!
//! Every other event type keeps its `data` as an opaque JSON value; see [`crate::EventData::Other`].

use serde_json::{Number, Value};

use crate::json::json_object;
use crate::message::Message;
use crate::stream::{StreamChunk, StreamRecord, TokenUsage};

json_object! {
    /// `turn/start`. V0 also carried `trigger`, which stays in `extra`.
    pub struct TurnStart {
        req turn: u64 = "turn",
    }
}

json_object! {
    /// `turn/end`; `reason` is `{kind, ...}` (completed, aborted, blocked, error, max-tokens,
    /// interrupted).
    pub struct TurnEnd {
        req turn: u64 = "turn",
        req reason: Value = "reason",
    }
}

json_object! {
    /// `step/start` and `step/end`.
    pub struct StepRef {
        req turn: u64 = "turn",
        req step: u64 = "step",
    }
}

json_object! {
    /// `system/message` (V3): the system prompt as a surface node.
    pub struct SystemMessageData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req message: Message = "message",
    }
}

json_object! {
    /// `developer/message` (V4): tool additions and removals as a surface node. `headerSeq` is
    /// kept as written so that a wrong type is refused with dsh's text (dsh-v4.md 4.4).
    pub struct DeveloperMessageData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req message: Message = "message",
        opt header_seq: Value = "headerSeq",
    }
}

json_object! {
    /// `assistant/message`. V0/V1 have no `stream`; they cite chunk events instead.
    pub struct AssistantMessageData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req message: Message = "message",
        opt stream: Vec<StreamRecord> = "stream",
        opt usage: TokenUsage = "usage",
        opt interrupted: bool = "interrupted",
    }
}

json_object! {
    /// `assistant/attempt` (V2+): a settled model call that produced no surface message.
    pub struct AssistantAttemptData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req stream: Vec<StreamRecord> = "stream",
    }
}

json_object! {
    /// `assistant/chunk` (V0/V1 only): one raw stream chunk as its own event.
    pub struct AssistantChunkData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req chunk: StreamChunk = "chunk",
    }
}

json_object! {
    /// `tool/call`: a call that started running.
    pub struct ToolCallData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req call_id: String = "callId",
        req name: String = "name",
        req arguments: String = "arguments",
    }
}

json_object! {
    /// `tool/result`: the surface node carrying a tool's result.
    pub struct ToolResultData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req message: Message = "message",
        opt error: Value = "error",
        opt meta: Value = "meta",
    }
}

json_object! {
    /// `request/header`: the request configuration in force from here on.
    pub struct RequestHeaderData {
        req header: EpochHeader = "header",
        req reason: String = "reason",
        opt starts_series: bool = "startsSeries",
    }
}

json_object! {
    /// The epoch header. `tools` is kept as written (its key order is significant for header
    /// equality, spec 8.2), and may be a `{{tools}}` placeholder in normalized recordings.
    pub struct EpochHeader {
        req config: CallConfig = "config",
        opt adapter_defaults: Value = "adapterDefaults",
        opt tools: Value = "tools",
        opt system: Value = "system",
    }
}

json_object! {
    /// The call configuration of a header. Numbers keep their written form.
    pub struct CallConfig {
        opt provider: String = "provider",
        req model: String = "model",
        opt reasoning_effort: String = "reasoningEffort",
        opt temperature: Number = "temperature",
        opt max_tokens: Number = "maxTokens",
        opt stop: Value = "stop",
    }
}

json_object! {
    /// `request/context`: the route the request goes to.
    pub struct RequestContextData {
        req provider: String = "provider",
        req model: String = "model",
        opt context_window: Number = "contextWindow",
        opt system_prompt_update: String = "systemPromptUpdate",
    }
}

json_object! {
    /// `session/end-seed`: the end of a seed; `inherited: true` marks a fork's cut.
    pub struct EndSeedData {
        opt inherited: bool = "inherited",
    }
}

json_object! {
    /// `compaction/start`. `turn` is the owner turn, or `null` for a standalone compaction.
    pub struct CompactionStartData {
        req compaction_id: String = "compactionId",
        req turn: Value = "turn",
        opt source_command_id: String = "sourceCommandId",
    }
}

json_object! {
    /// A surface span `{start, end}` in compaction payloads (names kept from the fold result).
    pub struct SeqRange {
        req start: u64 = "start",
        req end: u64 = "end",
    }
}

json_object! {
    /// `compaction/summary`: log-only; the checkpoint `user/message` right after it replaces
    /// the span.
    pub struct CompactionSummaryData {
        req compaction_id: String = "compactionId",
        req summary: Value = "summary",
        req shadowed_range: SeqRange = "shadowedRange",
        req shadowed_seqs: Vec<u64> = "shadowedSeqs",
        req shadowed_token_count: u64 = "shadowedTokenCount",
        req provider: String = "provider",
        req model: String = "model",
        opt source_command_id: String = "sourceCommandId",
        opt max_tokens: Number = "maxTokens",
        opt usage: Value = "usage",
        opt raw_output: Value = "rawOutput",
        opt llm_stream_call: bool = "llmStreamCall",
    }
}

json_object! {
    /// `compaction/prune`: precedes a model-free replacement.
    pub struct CompactionPruneData {
        req shadowed_range: SeqRange = "shadowedRange",
        req shadowed_seqs: Vec<u64> = "shadowedSeqs",
        req shadowed_token_count: u64 = "shadowedTokenCount",
    }
}

json_object! {
    /// `compaction/end`; `error` is present when the compaction failed.
    pub struct CompactionEndData {
        req compaction_id: String = "compactionId",
        req turn: Value = "turn",
        opt source_command_id: String = "sourceCommandId",
        opt error: Value = "error",
    }
}

json_object! {
    /// `image/offload` (spec 6.4): marks images of earlier surface nodes as offloaded.
    pub struct ImageOffloadData {
        req targets: Vec<OffloadTarget> = "targets",
    }
}

json_object! {
    /// One node whose images are offloaded.
    pub struct OffloadTarget {
        req seq: u64 = "seq",
        req image_indexes: Vec<u64> = "imageIndexes",
    }
}
