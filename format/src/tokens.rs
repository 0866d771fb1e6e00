//! The token meter's fixed heuristic estimator (spec 14; K `token-meter/src/estimate.ts`).
//!
//! Every "length" here is a JavaScript string length, that is a count of UTF-16 code units:
//! a character outside the Basic Multilingual Plane (an emoji) counts 2. "The JSON of" a value
//! is its compact serialization; key order does not change its length, and the members are
//! the ones the value holds (unknown members included), as `JSON.stringify` would see them.
//! Numbers are written by serde_json, which can differ from JavaScript for a few floats
//! (`1.0` against `1`); no member the estimator serializes holds such a number in practice.

use std::io;

use serde::Serialize;
use serde_json::Value;

use crate::message::{ContentBlock, Message};

/// Characters (UTF-16 code units) per estimated token.
pub const CHARS_PER_TOKEN: u64 = 4;
/// Tokens added per content block for its JSON framing and type tag.
pub const BLOCK_OVERHEAD_TOKENS: u64 = 4;
/// Tokens added per message for its role framing.
pub const ROLE_OVERHEAD_TOKENS: u64 = 4;

/// The estimate of one content block:
/// - `text`, `reasoning`: `ceil(len(text) / 4) + 4`;
/// - `tool-call`: `ceil(len(name) / 4) + ceil(len(arguments) / 4) + 4`;
/// - `tool-result`: the estimate of its nested content `+ 4`;
/// - anything else (`image`, `file`, an unknown type): `4 + ceil(len(JSON of the block) / 4)`,
///   an image's `offloaded` mark removed first.
pub fn estimate_block(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text(b) | ContentBlock::Reasoning(b) => {
            tokens_of(utf16_len(&b.text)) + BLOCK_OVERHEAD_TOKENS
        }
        ContentBlock::ToolCall(b) => {
            tokens_of(utf16_len(&b.name))
                + tokens_of(utf16_len(&b.arguments))
                + BLOCK_OVERHEAD_TOKENS
        }
        ContentBlock::ToolResult(b) => estimate_content(&b.content) + BLOCK_OVERHEAD_TOKENS,
        ContentBlock::Image(b) if b.offloaded.is_some() => {
            let mut reference = b.clone();
            reference.offloaded = None;
            estimate_structural(&ContentBlock::Image(reference))
        }
        other => estimate_structural(other),
    }
}

/// The sum of the block estimates of `blocks`.
pub fn estimate_content(blocks: &[ContentBlock]) -> u64 {
    blocks.iter().map(estimate_block).sum()
}

/// The estimate of one model-visible message. A `system` message costs 0 when its content is
/// empty, else `ceil(chars / 4) + 4`, where `chars` sums the text lengths of its `text`
/// blocks and the JSON lengths of its other blocks, with no per-block overhead (adapters send
/// the prompt as one string). Any other message costs its content estimate `+ 4`.
pub fn estimate_message(message: &Message) -> u64 {
    if message.role.as_deref() == Some("system") {
        return estimate_system_message(message);
    }
    estimate_content(&message.content) + ROLE_OVERHEAD_TOKENS
}

/// The estimate of the tools of a canonical header: 0 for an empty list (or an empty
/// placeholder string), else `ceil(len(JSON of the tools) / 4) + 4`. Absent tools cost 0;
/// the caller passes only tools that are present.
pub fn estimate_tools(tools: &Value) -> u64 {
    let empty = match tools {
        Value::Array(items) => items.is_empty(),
        Value::String(text) => text.is_empty(),
        _ => false,
    };
    if empty {
        return 0;
    }
    tokens_of(json_utf16_len(tools)) + BLOCK_OVERHEAD_TOKENS
}

/// The JavaScript length of `text`: its UTF-16 code units.
pub fn utf16_len(text: &str) -> u64 {
    text.chars().map(|c| c.len_utf16() as u64).sum()
}

fn estimate_system_message(message: &Message) -> u64 {
    if message.content.is_empty() {
        return 0;
    }
    let chars: u64 = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(b) => utf16_len(&b.text),
            other => json_utf16_len(other),
        })
        .sum();
    tokens_of(chars) + ROLE_OVERHEAD_TOKENS
}

fn estimate_structural(block: &ContentBlock) -> u64 {
    BLOCK_OVERHEAD_TOKENS + tokens_of(json_utf16_len(block))
}

/// `ceil(len / 4)`.
fn tokens_of(len: u64) -> u64 {
    len.div_ceil(CHARS_PER_TOKEN)
}

/// The UTF-16 length of the compact JSON of `value`, counted as it is written, without
/// building the string.
fn json_utf16_len(value: &impl Serialize) -> u64 {
    let mut counter = Utf16Counter { units: 0 };
    // Serializing into a counter cannot fail: the writer never fails, and every value the
    // format holds has string keys.
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.units,
        Err(_) => 0,
    }
}

/// Counts the UTF-16 code units of the UTF-8 bytes written to it: every byte that starts a
/// character counts 1, and a 4-byte sequence (a supplementary character) counts 2.
struct Utf16Counter {
    units: u64,
}

impl io::Write for Utf16Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &byte in buf {
            let starts_char = byte & 0xC0 != 0x80;
            self.units += u64::from(starts_char) + u64::from(byte >= 0xF0);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn block(value: Value) -> ContentBlock {
        serde_json::from_value(value).unwrap()
    }

    fn message(value: Value) -> Message {
        serde_json::from_value(value).unwrap()
    }

    // Goal: text and reasoning blocks cost ceil(len/4) + 4. Method: lengths around a multiple
    // of 4, and the empty text.
    #[test]
    fn text_and_reasoning_blocks() {
        let cases = [
            ("", 4),
            ("a", 5),
            ("abcd", 5),
            ("abcde", 6),
            ("abcdefgh", 6),
        ];
        for (text, expected) in cases {
            assert_eq!(
                estimate_block(&block(json!({"type": "text", "text": text}))),
                expected
            );
            let reasoning = json!({"type": "reasoning", "text": text});
            assert_eq!(estimate_block(&block(reasoning)), expected);
        }
    }

    // Goal: length is the UTF-16 length, as in JavaScript. Method: an emoji (2 units), a
    // two-byte and a three-byte UTF-8 character (1 unit each), written as escapes to keep
    // this source ASCII.
    #[test]
    fn length_counts_utf16_units() {
        assert_eq!(utf16_len("\u{1F600}"), 2);
        assert_eq!(utf16_len("\u{e9}\u{4e2d}"), 2);
        assert_eq!(utf16_len("ab"), 2);
        // Four emoji are 8 units: ceil(8/4) + 4; counted by bytes it would be 16/4 + 4.
        let text = "\u{1F600}".repeat(4);
        assert_eq!(estimate_block(&ContentBlock::text(text)), 6);
        let mut counter = Utf16Counter { units: 0 };
        io::Write::write_all(&mut counter, "a\u{e9}\u{4e2d}\u{1F600}".as_bytes()).unwrap();
        assert_eq!(counter.units, 5);
    }

    // Goal: a tool call prices its name and arguments separately. Method: name of 5 units
    // (2 tokens) and arguments of 8 units (2 tokens), plus the block overhead.
    #[test]
    fn tool_call_block() {
        let call = json!({"type": "tool-call", "id": "call_1", "name": "shell", "arguments": "{\"a\":1}x"});
        assert_eq!(estimate_block(&block(call)), 2 + 2 + 4);
        let empty = json!({"type": "tool-call", "id": "c", "name": "", "arguments": ""});
        assert_eq!(estimate_block(&block(empty)), 4);
    }

    // Goal: a tool result is its nested content plus one block overhead. Method: two nested
    // text blocks.
    #[test]
    fn tool_result_block() {
        let result = json!({"type": "tool-result", "toolCallId": "c", "isError": false,
            "content": [{"type": "text", "text": "abcde"}, {"type": "text", "text": ""}]});
        assert_eq!(estimate_block(&block(result)), (2 + 4) + 4 + 4);
    }

    // Goal: other blocks cost 4 + ceil(len(JSON)/4), without an image's offloaded mark.
    // Method: an image with and without the mark, a file, and an unknown block type, against
    // the lengths of their JSON texts.
    #[test]
    fn structural_blocks() {
        let image =
            json!({"type": "image", "attachment": {"attachmentId": "sha256:ab", "bytes": 3}});
        let text = serde_json::to_string(&image).unwrap();
        let expected = 4 + (text.len() as u64).div_ceil(4);
        assert_eq!(estimate_block(&block(image.clone())), expected);
        let mut offloaded = image.clone();
        offloaded["offloaded"] = json!(true);
        assert_eq!(estimate_block(&block(offloaded)), expected);
        let file =
            json!({"type": "file", "attachment": {"attachmentId": "x", "name": "n", "bytes": 1}});
        let length = serde_json::to_string(&file).unwrap().len() as u64;
        assert_eq!(estimate_block(&block(file)), 4 + length.div_ceil(4));
        let unknown = json!({"type": "audio", "clip": "\u{1F600}"});
        // The emoji is 4 bytes in the serialization but 2 UTF-16 units.
        let units = serde_json::to_string(&unknown).unwrap().len() as u64 - 2;
        assert_eq!(estimate_block(&block(unknown)), 4 + units.div_ceil(4));
    }

    // Goal: a non-system message is its content plus the role overhead. Method: a user
    // message with two blocks, and one with no content.
    #[test]
    fn ordinary_message() {
        let user = json!({"id": "u", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": "abcd"}, {"type": "text", "text": "abcdefghi"}]});
        assert_eq!(estimate_message(&message(user)), (1 + 4) + (3 + 4) + 4);
        let empty = json!({"id": "a", "role": "assistant", "content": []});
        assert_eq!(estimate_message(&message(empty)), 4);
    }

    // Goal: a system message sums characters over its blocks with no per-block overhead,
    // costs 0 when empty, and prices non-text blocks by their JSON length. Method: the three
    // cases side by side.
    #[test]
    fn system_message() {
        let two = json!({"id": "s", "role": "system",
            "content": [{"type": "text", "text": "abc"}, {"type": "text", "text": "de"}]});
        assert_eq!(estimate_message(&message(two)), 2 + 4);
        let empty = json!({"id": "s", "role": "system", "content": []});
        assert_eq!(estimate_message(&message(empty)), 0);
        let reasoning = json!({"type": "reasoning", "text": "r"});
        let length = serde_json::to_string(&reasoning).unwrap().len() as u64;
        let mixed = json!({"id": "s", "role": "system",
            "content": [{"type": "text", "text": "abcd"}, reasoning]});
        assert_eq!(
            estimate_message(&message(mixed)),
            (4 + length).div_ceil(4) + 4
        );
    }

    // Goal: tools cost ceil(len(JSON)/4) + 4, and nothing when empty. Method: a schema list
    // against its JSON length, an empty list, and the normalized placeholder string.
    #[test]
    fn tools() {
        let tools = json!([{"name": "bash", "parameters": {"type": "object"}}]);
        let length = serde_json::to_string(&tools).unwrap().len() as u64;
        assert_eq!(estimate_tools(&tools), length.div_ceil(4) + 4);
        assert_eq!(estimate_tools(&json!([])), 0);
        // `"{{tools}}"` is 11 characters of JSON.
        assert_eq!(estimate_tools(&json!("{{tools}}")), 3 + 4);
        assert_eq!(estimate_tools(&json!("")), 0);
    }
}
