//! Serialises a request (the header's config and tools, and the derived messages, as the log
//! holds them) into the DeepSeek chat-completions wire body. The loop serialises live calls
//! with the same function from the session fold, and `requests` from its rebuilt rows, so a
//! sent body and a rebuilt body are equal by construction.
//!
//! Mapping: a `system` message passes through at its position (an in-history update sits
//! after its round's user message); a tool-update notice (a plugin user message with
//! `form: "tool-update"`) becomes an in-history system message with `<tool_addition>` and
//! `<tool_removal>` blocks, as does a V4 `developer` message's `tool-addition`/`tool-removal`
//! blocks; user text stays `user`; each `tool-result` block, and each V4 `tool` message,
//! becomes a `tool` message; an assistant message carries `content`, `reasoning_content` and
//! `tool_calls`.

use serde_json::{json, Map, Value};
use sessionlog_format::{ContentBlock, Message};

use crate::requests::RequestRow;

/// The `form` of a tool-update notice message.
pub const TOOL_UPDATE_FORM: &str = "tool-update";

/// The wire body for `config` (a call configuration), `tools` (the header's schemas) and the
/// derived `messages`.
pub fn wire_body(config: &Value, tools: Option<&Value>, messages: &[Message]) -> Value {
    let mut body = Map::new();
    let model = config.get("model").cloned().unwrap_or(Value::Null);
    body.insert("model".into(), model);
    let wire: Vec<Value> = messages.iter().flat_map(wire_messages).collect();
    body.insert("messages".into(), Value::Array(wire));
    if let Some(Value::Array(tools)) = tools {
        let tools = tools
            .iter()
            .map(|t| json!({ "type": "function", "function": t }))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("maxTokens", "max_tokens"),
        ("stop", "stop"),
        ("reasoningEffort", "reasoning_effort"),
    ] {
        if let Some(value) = config.get(from) {
            body.insert(to.into(), value.clone());
        }
    }
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    Value::Object(body)
}

/// The wire body of a row that `requests` rebuilt (with bodies); `None` without messages.
pub fn row_body(row: &RequestRow) -> Option<Value> {
    let messages = row.messages.as_ref()?;
    let tools = row.tools.as_deref();
    Some(wire_body(&row.config, tools, messages))
}

/// Whether `provider` names a DeepSeek route: the routes whose wire body is this
/// serializer's (`deepseek-official` and other `deepseek*` providers).
pub fn is_deepseek_provider(provider: &str) -> bool {
    provider.starts_with("deepseek")
}

/// The wire body of a row on a DeepSeek route (the header's provider, else the request
/// context's); `None` on other routes or without messages.
pub fn deepseek_row_body(row: &RequestRow) -> Option<Value> {
    let provider = row
        .config
        .get("provider")
        .or_else(|| row.context.as_ref()?.get("provider"))
        .and_then(Value::as_str)?;
    if !is_deepseek_provider(provider) {
        return None;
    }
    row_body(row)
}

fn text_of(blocks: &[ContentBlock], reasoning: bool) -> String {
    let mut out = String::new();
    for block in blocks {
        match (block, reasoning) {
            (ContentBlock::Text(b), false) | (ContentBlock::Reasoning(b), true) => {
                out.push_str(&b.text)
            }
            _ => {}
        }
    }
    out
}

fn names(value: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(items)) = value else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The system text of a tool-update notice, or `None` for any other message. The notice's
/// plugin source is `kind:"plugin"` in V3 and a `plugin:<name>` producer kind in V4.
fn tool_update_text(message: &Message) -> Option<String> {
    let source = message.source.as_ref()?;
    let plugin = source.kind == "plugin" || source.kind.starts_with("plugin:");
    if !plugin || source.extra.get("form").and_then(Value::as_str) != Some(TOOL_UPDATE_FORM) {
        return None;
    }
    let mut text = String::new();
    for (member, tag) in [("added", "tool_addition"), ("removed", "tool_removal")] {
        let list = names(source.extra.get(member));
        if !list.is_empty() {
            text.push_str(&format!("<{tag}>\n{}\n</{tag}>\n", list.join("\n")));
        }
    }
    Some(text.trim_end().to_owned())
}

/// The system text of a V4 developer message's tool changes, or `None` when it has none.
fn developer_text(message: &Message) -> Option<String> {
    let mut text = String::new();
    for (tag, wire) in [
        ("tool-addition", "tool_addition"),
        ("tool-removal", "tool_removal"),
    ] {
        let list: Vec<&str> = message
            .content
            .iter()
            .filter(|b| b.tag() == tag)
            .filter_map(|b| match b {
                ContentBlock::Other(object) => object.get("toolName").and_then(Value::as_str),
                _ => None,
            })
            .collect();
        if !list.is_empty() {
            text.push_str(&format!("<{wire}>\n{}\n</{wire}>\n", list.join("\n")));
        }
    }
    let text = text.trim_end().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The wire messages of one derived message (a user message may hold several tool results).
fn wire_messages(message: &Message) -> Vec<Value> {
    let role = message.role.as_deref().unwrap_or("user");
    if let Some(text) = tool_update_text(message) {
        return vec![json!({ "role": "system", "content": text })];
    }
    match role {
        "system" => {
            let text = text_of(&message.content, false);
            if text.is_empty() {
                return Vec::new();
            }
            vec![json!({ "role": "system", "content": text })]
        }
        "assistant" => vec![assistant(message)],
        // V4: a tool result is its own message.
        "tool" => vec![json!({
            "role": "tool",
            "tool_call_id": message.extra.get("toolCallId").cloned().unwrap_or(Value::Null),
            "content": text_of(&message.content, false),
        })],
        "developer" => developer_text(message)
            .map(|text| json!({ "role": "system", "content": text }))
            .into_iter()
            .collect(),
        _ => {
            let mut out = Vec::new();
            for block in &message.content {
                if let ContentBlock::ToolResult(result) = block {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": result.tool_call_id,
                        "content": text_of(&result.content, false),
                    }));
                }
            }
            let text = text_of(&message.content, false);
            if out.is_empty() || !text.is_empty() {
                out.push(json!({ "role": "user", "content": text }));
            }
            out
        }
    }
}

fn assistant(message: &Message) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), "assistant".into());
    out.insert("content".into(), text_of(&message.content, false).into());
    let reasoning = text_of(&message.content, true);
    if !reasoning.is_empty() {
        out.insert("reasoning_content".into(), reasoning.into());
    }
    let calls: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })),
            _ => None,
        })
        .collect();
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_format::{Extra, Source};

    fn message(role: &str, source: Source, text: &str) -> Message {
        Message {
            id: Some("m".into()),
            role: Some(role.into()),
            content: vec![ContentBlock::text(text)],
            source: Some(source),
            extra: Extra::new(),
        }
    }

    fn source(kind: &str) -> Source {
        Source {
            kind: kind.into(),
            plugin: None,
            provider: None,
            model: None,
            call_id: None,
            extra: Extra::new(),
        }
    }

    // Goal: a history system message keeps its position, and tools and config map to the wire.
    // Method: serialise system, user, system and check the roles, the tools and max_tokens.
    #[test]
    fn system_messages_pass_through_in_place() {
        let messages = vec![
            message("system", source("plugin"), "p1"),
            message("user", source("user"), "q"),
            message("system", source("plugin"), "p2"),
        ];
        let config = json!({ "provider": "x", "model": "m", "maxTokens": 9 });
        let tools = json!([{ "name": "echo" }]);
        let body = wire_body(&config, Some(&tools), &messages);
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|v| v["role"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["system", "user", "system"]);
        assert_eq!(body["max_tokens"], 9);
        assert_eq!(body["tools"][0]["function"]["name"], "echo");
    }

    // Goal: a tool-update notice becomes tool_addition / tool_removal blocks in a system message.
    // Method: serialise a plugin notice with one added and one removed tool.
    #[test]
    fn tool_updates_become_blocks() {
        let mut src = source("plugin");
        src.extra.insert("form".into(), TOOL_UPDATE_FORM.into());
        src.extra.insert("added".into(), json!(["read"]));
        src.extra.insert("removed".into(), json!(["echo"]));
        let body = wire_body(&json!({ "model": "m" }), None, &[message("user", src, "")]);
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(
            body["messages"][0]["content"],
            "<tool_addition>\nread\n</tool_addition>\n<tool_removal>\necho\n</tool_removal>"
        );
    }

    // Goal: a V4 tool message is the wire's tool message, and a V4 developer message's tool
    // changes become tool_addition / tool_removal blocks in a system message (none when
    // empty).
    // Method: serialise a V4 tool message, a developer message with both blocks, an empty one.
    #[test]
    fn v4_tool_and_developer_messages() {
        let mut tool = message("tool", source("tool"), "out");
        tool.extra.insert("toolCallId".into(), json!("c1"));
        let block = |tag: &str, name: &str| {
            let mut object = Extra::new();
            object.insert("type".into(), tag.into());
            object.insert("toolName".into(), name.into());
            ContentBlock::Other(object)
        };
        let mut developer = message("developer", source("tool-registry"), "");
        developer.content = vec![
            block("tool-addition", "read"),
            block("tool-removal", "echo"),
        ];
        let mut empty = message("developer", source("tool-registry"), "");
        empty.content.clear();
        let body = wire_body(&json!({ "model": "m" }), None, &[tool, developer, empty]);
        assert_eq!(
            body["messages"],
            json!([
                { "role": "tool", "tool_call_id": "c1", "content": "out" },
                { "role": "system",
                  "content": "<tool_addition>\nread\n</tool_addition>\n<tool_removal>\necho\n</tool_removal>" },
            ])
        );
    }
}
