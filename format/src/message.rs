//! Messages and content blocks (spec 6.1): what a surface event shows the model.

use serde_json::Value;

use crate::json::{json_object, json_tagged};

json_object! {
    /// A message as dsh records it. `id` and `role` are optional here because V0 logs omit
    /// them; the admission rules of each version decide what must be present.
    pub struct Message {
        opt id: String = "id",
        opt role: String = "role",
        req content: Vec<ContentBlock> = "content",
        opt source: Source = "source",
    }
}

json_object! {
    /// Where a message came from: `{kind, ...}`. Only the members the rules read are typed;
    /// everything else (`form`, `sections`, `replayState`, `compactionId`, ...) stays in `extra`.
    pub struct Source {
        req kind: String = "kind",
        opt plugin: String = "plugin",
        opt provider: String = "provider",
        opt model: String = "model",
        opt call_id: String = "callId",
    }
}

json_tagged! {
    /// One content block of a message.
    pub enum ContentBlock {
        Text(TextBlock) = "text",
        Reasoning(TextBlock) = "reasoning",
        ToolCall(ToolCallBlock) = "tool-call",
        ToolResult(ToolResultBlock) = "tool-result",
        Image(AttachmentBlock) = "image",
        File(AttachmentBlock) = "file",
    }
}

json_object! {
    /// The body of a `text` or `reasoning` block.
    pub struct TextBlock {
        req text: String = "text",
    }
}

json_object! {
    /// A tool call the model made; `arguments` is the raw JSON text as a string.
    pub struct ToolCallBlock {
        req id: String = "id",
        req name: String = "name",
        req arguments: String = "arguments",
    }
}

json_object! {
    /// The result of a tool call, with nested content blocks.
    pub struct ToolResultBlock {
        req tool_call_id: String = "toolCallId",
        req content: Vec<ContentBlock> = "content",
        opt is_error: bool = "isError",
    }
}

json_object! {
    /// An `image` or `file` block. The attachment is kept opaque; `offloaded` is the mark set
    /// by the `image/offload` projection.
    pub struct AttachmentBlock {
        req attachment: Value = "attachment",
        opt offloaded: bool = "offloaded",
    }
}

impl Message {
    /// The source kind, or `""` when the message has no source.
    pub fn source_kind(&self) -> &str {
        self.source.as_ref().map_or("", |s| s.kind.as_str())
    }
}

impl ContentBlock {
    /// A text block with no unknown members.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Default::default(),
        })
    }

    /// The `text` blocks of `content` concatenated, without reasoning: what a reader of the
    /// reply sees.
    pub fn reply_text(content: &[ContentBlock]) -> String {
        content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The text of a `text` or `reasoning` block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(b) | ContentBlock::Reasoning(b) => Some(&b.text),
            _ => None,
        }
    }
}
