//! The embedded stream of an assistant message: raw chunks, packed deltas and usage.

use serde_json::{json, Value};

use crate::json::Extra;
use crate::message::ContentBlock;
use crate::pieces::Pieces;
use crate::stream::{
    BlockEnd, BlockStart, Finish, RawChunk, StreamChunk, StreamRecord, TextChunks, TokenUsage,
    ToolCallChunks, UsageChunk,
};

use super::rng::Rng;
use super::surface_model::tokens_of;
use super::{Generator, REQUEST_OVERHEAD_TOKENS};

impl Generator {
    /// Usage of a request over the current surface; the provider caches the last prefix.
    pub(super) fn usage(&mut self, content: &[ContentBlock]) -> TokenUsage {
        let output_tokens = tokens_of(content);
        let reasoning_tokens = match content.first() {
            Some(block @ ContentBlock::Reasoning(_)) => tokens_of(std::slice::from_ref(block)),
            _ => 0,
        };
        let input = self.surface_tokens() + REQUEST_OVERHEAD_TOKENS;
        let cache_read_tokens = self.cached_tokens.min(input) / 64 * 64;
        self.cached_tokens = input + output_tokens;
        TokenUsage {
            input_tokens: input - cache_read_tokens,
            output_tokens,
            cache_read_tokens: Some(cache_read_tokens),
            reasoning_tokens: Some(reasoning_tokens),
            total_tokens: None,
            extra: Extra::new(),
        }
    }

    /// The stream of a message: per block a raw start, its packed deltas and a raw end, then
    /// usage and finish. Advances the clock by the time the deltas take.
    pub(super) fn stream(
        &mut self,
        content: &[ContentBlock],
        usage: &TokenUsage,
        finish: &str,
    ) -> Vec<StreamRecord> {
        let mut records = Vec::with_capacity(content.len() * 3 + 2);
        for (index, block) in (0u64..).zip(content) {
            let block_type = block.tag().to_owned();
            let start = BlockStart {
                index,
                block_type,
                extra: Extra::new(),
            };
            records.push(raw(self.time, StreamChunk::BlockStart(start)));
            records.push(self.packed(index, block));
            let end = BlockEnd {
                index,
                block: block.clone(),
                extra: Extra::new(),
            };
            records.push(raw(self.time, StreamChunk::BlockEnd(end)));
            self.advance(0, 5);
        }
        let usage = UsageChunk {
            usage: usage.clone(),
            extra: Extra::new(),
        };
        records.push(raw(self.time, StreamChunk::Usage(usage)));
        records.push(raw(self.time, finish_chunk(json!({ "kind": finish }))));
        records
    }

    /// The packed delta record of one block; its pieces concatenate to the block exactly.
    fn packed(&mut self, index: u64, block: &ContentBlock) -> StreamRecord {
        let time0 = self.time;
        match block {
            ContentBlock::Reasoning(b) | ContentBlock::Text(b) => {
                let texts = deltas(&mut self.rng, &b.text);
                let dt = self.delta_times(texts.len());
                let chunks = TextChunks {
                    time0,
                    index,
                    dt: dt.into(),
                    texts,
                    extra: Extra::new(),
                };
                if matches!(block, ContentBlock::Reasoning(_)) {
                    StreamRecord::ReasoningChunks(chunks)
                } else {
                    StreamRecord::TextChunks(chunks)
                }
            }
            ContentBlock::ToolCall(call) => {
                // The first delta names the call and carries no arguments, as dsh records it.
                let args: Pieces = std::iter::once("")
                    .chain(&deltas(&mut self.rng, &call.arguments))
                    .collect();
                let dt = self.delta_times(args.len());
                StreamRecord::ToolCallChunks(ToolCallChunks {
                    time0,
                    index,
                    dt: dt.into(),
                    id: call.id.clone(),
                    name: Some(call.name.clone()),
                    args,
                    extra: Extra::new(),
                })
            }
            _ => panic!("assistant messages hold only reasoning, text and tool-call blocks"),
        }
    }

    /// `count - 1` gaps between deltas, mostly tens of ms with an occasional stall.
    fn delta_times(&mut self, count: usize) -> Vec<i64> {
        assert!(count > 0, "a packed record holds at least one delta");
        let dt: Vec<i64> = (1..count)
            .map(|_| {
                let ms = if self.rng.permille(15) {
                    self.rng.range(80, 600)
                } else {
                    self.rng.range(0, 40)
                };
                i64::try_from(ms).expect("a small delay")
            })
            .collect();
        self.time += dt.iter().sum::<i64>();
        dt
    }
}

pub(super) fn raw(time: i64, chunk: StreamChunk) -> StreamRecord {
    StreamRecord::Chunk(RawChunk {
        time,
        chunk,
        extra: Extra::new(),
    })
}

pub(super) fn finish_chunk(reason: Value) -> StreamChunk {
    StreamChunk::Finish(Finish {
        reason,
        replay_state: None,
        extra: Extra::new(),
    })
}

/// Splits ASCII `text` into stream deltas the way a tokenizer would: leading spaces stay with
/// the next word, punctuation stands alone, and long words sometimes break in two. The
/// deltas concatenate to `text` exactly, and there is always at least one.
fn deltas(rng: &mut Rng, text: &str) -> Pieces {
    assert!(
        text.is_ascii(),
        "generated text is ASCII, so any byte index is a char boundary"
    );
    let bytes = text.as_bytes();
    let mut out = Pieces::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = start;
        while end < bytes.len() && bytes[end].is_ascii_whitespace() {
            end += 1;
        }
        if end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
            while end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
                end += 1;
            }
        } else if end < bytes.len() {
            end += 1;
        }
        if end - start > 7 && rng.permille(300) {
            let middle = start + (end - start) / 2;
            out.push(&text[start..middle]);
            start = middle;
        }
        out.push(&text[start..end]);
        start = end;
    }
    if out.is_empty() {
        out.push("");
    }
    debug_assert_eq!(out.joined(), text);
    out
}
