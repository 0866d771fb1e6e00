//! `buildSummarizationInput` (spec 13.3): the summariser's request as a prefix-extension of the last routed request.

use serde_json::Value;
use sessionlog_format::{ContentBlock, Extra, Message, SessionFold, Source};

use super::range::CompactRange;
use sessionlog_engine::wire::wire_body;

/// The trailing instruction of every summarisation call. It sits after the replayed
/// conversation rather than in a system prompt of its own: a different first token would
/// invalidate the provider's whole cached prefix.
pub const COMPACTION_INSTRUCTION: &str = "You are now acting as a compaction engine. \
Condense the conversation ABOVE this message into a checkpoint that lets the work continue \
without it. Keep the structured headings of any prior checkpoint and update their content:\n\
## Goal\n## Constraints and preferences\n## Progress (done, in progress, blocked)\n\
## Key decisions\n## Relevant files, commands and facts\n## Next steps\n\
Rules: do not mention this summarisation request or that a summary was asked for; output only \
the checkpoint text; do not call any tool.";

/// What the summariser is sent: the header's tools and the replayed messages. There is no
/// separate `system`: a system prompt on the surface is one of the messages.
#[derive(Debug, Clone, PartialEq)]
pub struct SummarizationInput {
    /// The tools of the request header in force, kept even though the summariser calls none:
    /// dropping them would shift every following token of the cached sequence.
    pub tools: Option<Value>,
    /// The call configuration of the header in force (`null` before any header).
    pub config: Value,
    /// The derived messages of the surface up to the end of the range, in surface order: the
    /// head before the range (its system nodes), then every shadowed node, a mid-range system
    /// node in place. Nodes that derive no message are left out, as in `deriveMessages()`.
    pub messages: Vec<Message>,
}

impl SummarizationInput {
    /// The messages the call sends: the replayed prefix and the trailing instruction.
    pub fn call_messages(&self) -> Vec<Message> {
        let mut messages = self.messages.clone();
        messages.push(instruction_message());
        messages
    }

    /// The DeepSeek wire body of the call, with `model` replaced when the summarisation route
    /// is not the conversation's.
    pub fn wire_body(&self, model: Option<&str>) -> Value {
        let mut config = self.config.clone();
        if let (Some(model), Value::Object(map)) = (model, &mut config) {
            map.insert("model".into(), Value::String(model.to_owned()));
        }
        if config.is_null() {
            config = serde_json::json!({ "model": model });
        }
        wire_body(&config, self.tools.as_ref(), &self.call_messages())
    }
}

/// The trailing user message that carries [`COMPACTION_INSTRUCTION`].
pub fn instruction_message() -> Message {
    Message {
        id: None,
        role: Some("user".into()),
        content: vec![ContentBlock::text(COMPACTION_INSTRUCTION)],
        source: Some(Source {
            kind: "plugin".into(),
            plugin: Some("compact".into()),
            provider: None,
            model: None,
            call_id: None,
            extra: Extra::new(),
        }),
        extra: Extra::new(),
    }
}

/// The summarisation input for `range` over the fold's live surface. `range` must come from
/// this fold's surface; positions beyond it are ignored.
pub fn build_summarization_input(fold: &SessionFold, range: &CompactRange) -> SummarizationInput {
    let header = fold.request_header();
    let tools = header.and_then(|h| h.tools.clone());
    let config = header
        .and_then(|h| serde_json::to_value(&h.config).ok())
        .unwrap_or(Value::Null);
    let messages = fold
        .node_messages()
        .take(range.end_idx + 1)
        .filter_map(|(_, m)| m.cloned())
        .collect();
    SummarizationInput {
        tools,
        config,
        messages,
    }
}
