//! The adapter trait, the prepared route, and the stream builder that turns provider deltas
//! into an assistant message's content and its packed stream records (spec 6.2).

use serde_json::{json, Value};
use sessionlog_format::message::{TextBlock, ToolCallBlock};
use sessionlog_format::stream::{
    BlockEnd, BlockStart, Finish, RawChunk, StreamChunk, StreamRecord, TextChunks, TokenUsage,
    ToolCallChunks, UsageChunk,
};
use sessionlog_format::{ContentBlock, Extra, Gaps, Pieces};

use super::CancelToken;
use crate::prompt::capability::PreparedCall;

/// One call as the adapter sends it: the prepared route and the wire body rebuilt from the
/// log (the DeepSeek chat-completions body; other adapters may read only what they need).
#[derive(Debug, Clone)]
pub struct CallRequest<'a> {
    /// The route: provider, model, capability and context window.
    pub route: &'a PreparedCall,
    pub body: &'a Value,
}

/// One normalised delta of a provider stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
    /// A tool-call delta: the provider's call index, and the id and name on the first delta.
    ToolCall {
        index: u64,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(TokenUsage),
    /// The provider's finish reason (`stop`, `tool_calls`, `length`, ...).
    Finish(String),
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailure {
    /// `RATE_LIMITED`, `SERVER_ERROR`, `STREAM_ERROR`, `TIMEOUT`, `HTTP_ERROR`, `ABORTED`, ...
    pub code: String,
    pub message: String,
    /// A bounded retry may succeed (429, 5xx, a broken stream, a timeout).
    pub retryable: bool,
}

impl CallFailure {
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> CallFailure {
        CallFailure {
            code: code.to_owned(),
            message: message.into(),
            retryable,
        }
    }

    pub fn aborted() -> CallFailure {
        CallFailure::new("ABORTED", "the call was cancelled", false)
    }

    pub fn is_aborted(&self) -> bool {
        self.code == "ABORTED"
    }

    /// The `failure` member of a finish chunk or an `llm/retry`.
    pub fn to_json(&self) -> Value {
        json!({ "message": self.message, "code": self.code })
    }
}

/// A model provider. Synchronous to the loop: an adapter that talks HTTP runs its own
/// runtime inside `stream`.
pub trait LlmAdapter {
    /// Sends one call and feeds every delta to `sink`, in order. Returns once the stream
    /// finished; checks `cancel` while waiting and then returns [`CallFailure::aborted`].
    fn stream(
        &mut self,
        call: &CallRequest<'_>,
        cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure>;
}

/// The bounded retry policy of the loop: on a retryable failure, wait
/// `base_delay_ms * 2^(retry-1)` and try again, at most `max_retries` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay_ms: 500,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry `retry` (1-based).
    pub fn delay_ms(&self, retry: u32) -> u64 {
        let shift = retry.saturating_sub(1).min(16);
        self.base_delay_ms.saturating_mul(1u64 << shift)
    }
}

/// The block being streamed.
enum Open {
    Text(u64, TextChunks),
    Reasoning(u64, TextChunks),
    Tool(u64, u64, ToolCallChunks),
}

/// Accumulates deltas into content blocks and stream records.
pub struct StreamBuilder {
    content: Vec<ContentBlock>,
    records: Vec<StreamRecord>,
    open: Option<Open>,
    usage: Option<TokenUsage>,
    finish: Option<String>,
    last_time: i64,
}

/// What a finished stream produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub content: Vec<ContentBlock>,
    pub stream: Vec<StreamRecord>,
    pub usage: Option<TokenUsage>,
    /// `stop`, `tool-calls` or `max-tokens`.
    pub finish: String,
}

impl Default for StreamBuilder {
    fn default() -> Self {
        StreamBuilder::new()
    }
}

fn raw(time: i64, chunk: StreamChunk) -> StreamRecord {
    StreamRecord::Chunk(RawChunk {
        time,
        chunk,
        extra: Extra::new(),
    })
}

fn packed(time: i64, index: u64) -> TextChunks {
    TextChunks {
        time0: time,
        index,
        dt: Gaps::default(),
        texts: Pieces::new(),
        extra: Extra::new(),
    }
}

impl StreamBuilder {
    pub fn new() -> StreamBuilder {
        StreamBuilder {
            content: Vec::new(),
            records: Vec::new(),
            open: None,
            usage: None,
            finish: None,
            last_time: 0,
        }
    }

    /// Adds one delta received at `time` (ms).
    pub fn push(&mut self, time: i64, delta: Delta) {
        self.last_time = time;
        match delta {
            Delta::Text(text) => self.push_text(time, text, false),
            Delta::Reasoning(text) => self.push_text(time, text, true),
            Delta::ToolCall {
                index,
                id,
                name,
                arguments,
            } => self.push_tool(time, index, id, name, arguments),
            Delta::Usage(usage) => self.usage = Some(usage),
            Delta::Finish(reason) => self.finish = Some(reason),
        }
    }

    fn push_text(&mut self, time: i64, text: String, reasoning: bool) {
        let same = matches!(
            (&self.open, reasoning),
            (Some(Open::Text(..)), false) | (Some(Open::Reasoning(..)), true)
        );
        if !same {
            self.close(time);
            let index = self.content.len() as u64 + u64::from(self.open.is_some());
            let kind = if reasoning { "reasoning" } else { "text" };
            self.start(time, index, kind);
            self.open = Some(if reasoning {
                Open::Reasoning(index, packed(time, index))
            } else {
                Open::Text(index, packed(time, index))
            });
        }
        if let Some(Open::Text(_, chunks) | Open::Reasoning(_, chunks)) = &mut self.open {
            append_packed(&mut chunks.dt, &mut chunks.time0, chunks.texts.len(), time);
            chunks.texts.push(&text);
        }
    }

    fn push_tool(
        &mut self,
        time: i64,
        call: u64,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    ) {
        let same = matches!(&self.open, Some(Open::Tool(_, c, _)) if *c == call);
        if !same {
            self.close(time);
            let index = self.content.len() as u64;
            self.start(time, index, "tool-call");
            let chunks = ToolCallChunks {
                time0: time,
                index,
                dt: Gaps::default(),
                id: id.clone().unwrap_or_default(),
                name: name.clone(),
                args: Pieces::new(),
                extra: Extra::new(),
            };
            self.open = Some(Open::Tool(index, call, chunks));
        }
        if let Some(Open::Tool(_, _, chunks)) = &mut self.open {
            if chunks.id.is_empty() {
                if let Some(id) = id {
                    chunks.id = id;
                }
            }
            if chunks.name.is_none() {
                chunks.name = name;
            }
            append_packed(&mut chunks.dt, &mut chunks.time0, chunks.args.len(), time);
            chunks.args.push(&arguments);
        }
    }

    fn start(&mut self, time: i64, index: u64, kind: &str) {
        let chunk = StreamChunk::BlockStart(BlockStart {
            index,
            block_type: kind.to_owned(),
            extra: Extra::new(),
        });
        self.records.push(raw(time, chunk));
    }

    /// Closes the open block: its packed record, then `block-end` with the whole block.
    fn close(&mut self, time: i64) {
        let Some(open) = self.open.take() else { return };
        let (index, block, record) = match open {
            Open::Text(index, chunks) => {
                let block = ContentBlock::text(chunks.texts.concat());
                (index, block, StreamRecord::TextChunks(chunks))
            }
            Open::Reasoning(index, chunks) => {
                let block = ContentBlock::Reasoning(TextBlock {
                    text: chunks.texts.concat(),
                    extra: Extra::new(),
                });
                (index, block, StreamRecord::ReasoningChunks(chunks))
            }
            Open::Tool(index, _, chunks) => {
                let block = ContentBlock::ToolCall(ToolCallBlock {
                    id: chunks.id.clone(),
                    name: chunks.name.clone().unwrap_or_default(),
                    arguments: chunks.args.concat(),
                    extra: Extra::new(),
                });
                (index, block, StreamRecord::ToolCallChunks(chunks))
            }
        };
        self.records.push(record);
        let end = StreamChunk::BlockEnd(BlockEnd {
            index,
            block: block.clone(),
            extra: Extra::new(),
        });
        self.records.push(raw(time, end));
        self.content.push(block);
    }

    /// Closes the stream: the last block, the usage and the finish record.
    pub fn finish(mut self) -> Completion {
        let time = self.last_time;
        self.close(time);
        if let Some(usage) = &self.usage {
            let chunk = StreamChunk::Usage(UsageChunk {
                usage: usage.clone(),
                extra: Extra::new(),
            });
            self.records.push(raw(time, chunk));
        }
        let has_calls = self
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall(_)));
        let finish = match self.finish.as_deref() {
            Some("length") => "max-tokens",
            _ if has_calls => "tool-calls",
            _ => "stop",
        };
        let chunk = StreamChunk::Finish(Finish {
            reason: json!({ "kind": finish }),
            replay_state: None,
            extra: Extra::new(),
        });
        self.records.push(raw(time, chunk));
        Completion {
            content: self.content,
            stream: self.records,
            usage: self.usage,
            finish: finish.to_owned(),
        }
    }
}

/// Extends a packed row's `dt` for its member number `count` at `time`.
fn append_packed(dt: &mut Vec<i64>, time0: &mut i64, count: usize, time: i64) {
    if count == 0 {
        *time0 = time;
        return;
    }
    let elapsed: i64 = *time0 + dt.iter().sum::<i64>();
    dt.push((time - elapsed).max(0));
}

/// The stream of a failed attempt: the usage when known, then `finish {kind:error}`.
pub fn failed_stream(time: i64, failure: &CallFailure) -> Vec<StreamRecord> {
    let chunk = StreamChunk::Finish(Finish {
        reason: json!({ "kind": "error", "failure": failure.to_json() }),
        replay_state: None,
        extra: Extra::new(),
    });
    vec![raw(time, chunk)]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: deltas of reasoning, text and a tool call become three blocks and packed records.
    // Method: push a mixed stream and check the content and the record kinds in order.
    #[test]
    fn builder_packs_blocks_in_order() {
        let mut b = StreamBuilder::new();
        b.push(10, Delta::Reasoning("th".into()));
        b.push(12, Delta::Reasoning("ink".into()));
        b.push(15, Delta::Text("hi".into()));
        let call = |id: Option<&str>, args: &str| Delta::ToolCall {
            index: 0,
            id: id.map(str::to_owned),
            name: id.map(|_| "echo".to_owned()),
            arguments: args.into(),
        };
        b.push(20, call(Some("c1"), "{\"te"));
        b.push(21, call(None, "xt\":1}"));
        b.push(22, Delta::Finish("tool_calls".into()));
        let done = b.finish();
        assert_eq!(done.content.len(), 3);
        assert_eq!(done.content[0].as_text(), Some("think"));
        assert_eq!(done.finish, "tool-calls");
        match &done.content[2] {
            ContentBlock::ToolCall(c) => assert_eq!(c.arguments, "{\"text\":1}"),
            other => panic!("not a tool call: {other:?}"),
        }
        match &done.stream[1] {
            StreamRecord::ReasoningChunks(c) => assert_eq!(c.dt, vec![2]),
            other => panic!("not packed: {other:?}"),
        }
    }

    // Goal: the retry delay doubles and never overflows.
    // Method: compute a few delays, including a huge retry number.
    #[test]
    fn retry_delay_doubles() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay_ms: 100,
        };
        assert_eq!((p.delay_ms(1), p.delay_ms(3)), (100, 400));
        assert!(p.delay_ms(u32::MAX) > 0);
    }
}
