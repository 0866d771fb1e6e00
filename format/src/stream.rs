//! Assistant stream records (spec 6.2) and token usage ( 6.3).

use serde_json::Value;

use crate::gaps::Gaps;
use crate::json::{json_object, json_tagged};
use crate::message::ContentBlock;
use crate::pieces::Pieces;

json_tagged! {
    /// One record of an embedded assistant stream (`assistant/message.data.stream`).
    pub enum StreamRecord {
        TextChunks(TextChunks) = "text-chunks",
        ReasoningChunks(TextChunks) = "reasoning-chunks",
        ToolCallChunks(ToolCallChunks) = "tool-call-chunks",
        Chunk(RawChunk) = "chunk",
    }
}

json_object! {
    /// Packed text or reasoning deltas of one block: member `i` has time
    /// `time0 + dt[0] + ... + dt[i-1]`, so `dt` has one element fewer than `texts`.
    pub struct TextChunks {
        req time0: i64 = "time0",
        req index: u64 = "index",
        req dt: Gaps = "dt",
        req texts: Pieces = "texts",
    }
}

json_object! {
    /// Packed argument deltas of one tool call.
    pub struct ToolCallChunks {
        req time0: i64 = "time0",
        req index: u64 = "index",
        req dt: Gaps = "dt",
        req id: String = "id",
        opt name: String = "name",
        req args: Pieces = "args",
    }
}

json_object! {
    /// One raw stream chunk with its own time.
    pub struct RawChunk {
        req time: i64 = "time",
        req chunk: StreamChunk = "chunk",
    }
}

json_tagged! {
    /// A chunk of the provider stream, as the LLM layer normalises it.
    pub enum StreamChunk {
        BlockStart(BlockStart) = "block-start",
        TextDelta(Delta) = "text-delta",
        ReasoningDelta(Delta) = "reasoning-delta",
        ToolCallDelta(ToolCallDelta) = "tool-call-delta",
        BlockEnd(BlockEnd) = "block-end",
        Usage(UsageChunk) = "usage",
        Finish(Finish) = "finish",
    }
}

json_object! {
    /// Opens content block `index` of the given type.
    pub struct BlockStart {
        req index: u64 = "index",
        req block_type: String = "blockType",
    }
}

json_object! {
    /// A text or reasoning delta.
    pub struct Delta {
        req index: u64 = "index",
        req text: String = "text",
    }
}

json_object! {
    /// A tool-call delta; the first delta of a call names it.
    pub struct ToolCallDelta {
        req index: u64 = "index",
        opt id: String = "id",
        opt name: String = "name",
        opt arguments_delta: String = "argumentsDelta",
    }
}

json_object! {
    /// Closes block `index` with the finished block.
    pub struct BlockEnd {
        req index: u64 = "index",
        req block: ContentBlock = "block",
    }
}

json_object! {
    /// Usage reported by the provider.
    pub struct UsageChunk {
        req usage: TokenUsage = "usage",
    }
}

json_object! {
    /// End of the stream: `reason` is `{kind: stop|tool-calls|max-tokens|error, failure?}`.
    pub struct Finish {
        req reason: Value = "reason",
        opt replay_state: Value = "replayState",
    }
}

json_object! {
    /// Token usage as recorded.
    pub struct TokenUsage {
        req input_tokens: u64 = "inputTokens",
        req output_tokens: u64 = "outputTokens",
        opt cache_read_tokens: u64 = "cacheReadTokens",
        opt reasoning_tokens: u64 = "reasoningTokens",
        opt total_tokens: u64 = "totalTokens",
    }
}
