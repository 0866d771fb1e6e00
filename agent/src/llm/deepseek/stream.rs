//! Maps one chat-completions SSE chunk (the JSON of a `data:` line) to deltas, and the
//! provider's usage to [`TokenUsage`] with `prompt_cache_hit_tokens` as `cacheReadTokens`.

use serde_json::Value;
use sessionlog_format::stream::TokenUsage;
use sessionlog_format::Extra;

use crate::llm::adapter::Delta;

/// The data of the stream's last event.
pub const DONE: &str = "[DONE]";

/// The deltas of one chunk, in the order the loop applies them.
pub fn chunk_deltas(chunk: &Value) -> Vec<Delta> {
    let mut out = Vec::new();
    if let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) {
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(Delta::Reasoning(text.to_owned()));
            }
        }
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(Delta::Text(text.to_owned()));
            }
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            for call in calls {
                let function = call.get("function").unwrap_or(&Value::Null);
                let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
                out.push(Delta::ToolCall {
                    index: call.get("index").and_then(Value::as_u64).unwrap_or(0),
                    id: text(call.get("id")),
                    name: text(function.get("name")),
                    arguments: text(function.get("arguments")).unwrap_or_default(),
                });
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(Delta::Finish(reason.to_owned()));
        }
    }
    if let Some(usage) = chunk.get("usage").and_then(usage) {
        out.push(Delta::Usage(usage));
    }
    out
}

/// The provider usage as [`TokenUsage`]; `None` when it is not an object.
pub fn usage(value: &Value) -> Option<TokenUsage> {
    let field = |name: &str| value.get(name).and_then(Value::as_u64);
    if !value.is_object() {
        return None;
    }
    let reasoning = value
        .get("completion_tokens_details")
        .and_then(|d| d.get("reasoning_tokens"))
        .and_then(Value::as_u64);
    Some(TokenUsage {
        input_tokens: field("prompt_tokens").unwrap_or(0),
        output_tokens: field("completion_tokens").unwrap_or(0),
        cache_read_tokens: field("prompt_cache_hit_tokens"),
        reasoning_tokens: reasoning,
        total_tokens: field("total_tokens"),
        extra: Extra::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Goal: content, reasoning, tool-call deltas, the finish reason and usage are all read.
    // Method: map one rich chunk and compare the deltas.
    #[test]
    fn chunk_maps_every_member() {
        let chunk = json!({
            "choices": [{ "delta": {
                "reasoning_content": "r", "content": "t",
                "tool_calls": [{ "index": 0, "id": "c", "function": { "name": "echo", "arguments": "{" } }]
            }, "finish_reason": "tool_calls" }],
            "usage": { "prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 8, "total_tokens": 12 }
        });
        let deltas = chunk_deltas(&chunk);
        assert_eq!(deltas.len(), 5);
        assert_eq!(deltas[0], Delta::Reasoning("r".into()));
        match &deltas[4] {
            Delta::Usage(u) => assert_eq!((u.input_tokens, u.cache_read_tokens), (10, Some(8))),
            other => panic!("not usage: {other:?}"),
        }
    }
}
