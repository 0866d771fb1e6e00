//! The V2 source audit (spec 10.6): what the V2 -> V3 edge refuses to transform.

use serde_json::{Map, Value};
use sessionlog_format::message::{AttachmentBlock, Source};
use sessionlog_format::payload::ToolResultData;
use sessionlog_format::{ContentBlock, Event, EventData, EventType, Message};

use super::members;
use crate::error::Reason;

/// The message source kinds audited by the edge (spec 6.1).
pub(crate) const SOURCE_KINDS: [&str; 15] = [
    "user",
    "plugin",
    "model",
    "tool",
    "agent-instructions",
    "session-reference",
    "team-message",
    "goal",
    "skill-invocation",
    "skill-catalog",
    "coordinator",
    "subagent-report",
    "subagent-settled",
    "webhook",
    "agent-message",
];

/// The content block kinds audited by the edge (spec 10.6 item 8).
const BLOCK_KINDS: [&str; 6] = [
    "text",
    "reasoning",
    "image",
    "tool-call",
    "file",
    "tool-result",
];

/// Checks one source event; the first failed rule is the refusal.
pub(crate) fn audit(event: &Event) -> Result<(), Reason> {
    let kind = || event.kind.as_str().to_owned();
    if !is_classified(&event.kind) {
        return Err(Reason::UnclassifiedEvent { kind: kind() });
    }
    let surface = event.kind.is_surface_pre_v3();
    if !surface && event.surface_op.is_some() {
        let field = "surfaceOp";
        return Err(Reason::UnexpectedField {
            kind: kind(),
            field,
        });
    }
    let assistant = event.kind == EventType::AssistantMessage;
    if (!surface || assistant) && event.source_event_seqs.is_some() {
        let field = "sourceEventSeqs";
        return Err(Reason::UnexpectedField {
            kind: kind(),
            field,
        });
    }
    if surface && event.surface_op.is_none() {
        return Err(Reason::MissingSurfaceOp { kind: kind() });
    }
    audit_payload(event)
}

/// Spec 10.6 item 1: the released V2 dispositions plus the two feedback types. Everything
/// else is refused even when ignorable: `system/message`, the V3 PTC tags, `image/offload`,
/// `subagent/catalog`, `deliverables/presented`, fork-only and V0-only types, and unknowns.
fn is_classified(kind: &EventType) -> bool {
    use EventType as T;
    crate::inventory::is_shared_released(kind)
        || matches!(
            kind,
            T::AssistantAttempt | T::FeedbackMessageDelete | T::FeedbackMessagePut
        )
}

fn audit_payload(event: &Event) -> Result<(), Reason> {
    let payload = |detail: &str| Reason::Payload {
        kind: event.kind.as_str().to_owned(),
        detail: detail.to_owned(),
    };
    members::check(&event.kind, &event.data).map_err(|detail| payload(&detail))?;
    match &event.data {
        EventData::AssistantMessage(data) => {
            if data.turn == 0 || data.step == 0 {
                return Err(payload("turn and step must be positive"));
            }
            if data.stream.is_none() {
                return Err(payload("stream must be an array"));
            }
            audit_message(&data.message)
        }
        EventData::AssistantAttempt(data) if data.turn == 0 || data.step == 0 => {
            Err(payload("turn and step must be positive"))
        }
        EventData::SessionEndSeed(data) if data.inherited == Some(false) => {
            Err(payload("inherited must be true when present"))
        }
        EventData::UserMessage(message) => audit_message(message),
        EventData::ToolResult(data) => {
            audit_message(&data.message)?;
            audit_tool_result(data).map_err(payload)
        }
        EventData::Other(data) if event.kind == EventType::AgentInboxSpliced => {
            let inserted = data.get("inserted").and_then(Value::as_array);
            for message in inserted.into_iter().flatten() {
                members::check_opaque_message(message).map_err(|detail| payload(&detail))?;
                audit_opaque_message(message)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Spec 10.6 items 9 and 10.
fn audit_tool_result(data: &ToolResultData) -> Result<(), &'static str> {
    let Some(error) = &data.error else {
        return Ok(());
    };
    let flagged = match data.message.content.first() {
        Some(ContentBlock::ToolResult(block)) => block.is_error == Some(true),
        _ => false,
    };
    if !flagged {
        return Err(
            "error requires message.content[0].isError to be true; a contradictory \
                    tool error is never repaired",
        );
    }
    if error.get("code").and_then(Value::as_str) != Some("TOOL_NOT_STARTED") {
        return Ok(());
    }
    let call_id = data
        .message
        .source
        .as_ref()
        .and_then(|s| s.call_id.as_deref());
    let canonical = match (data.message.id.as_deref(), call_id) {
        (Some(id), Some(call_id)) => is_repair_id(id, call_id),
        _ => false,
    };
    if !canonical {
        return Err("TOOL_NOT_STARTED id must be interrupted-tool-result-<callId>-<integer>");
    }
    Ok(())
}

/// `interrupted-tool-result-<callId>-<integer>`.
fn is_repair_id(id: &str, call_id: &str) -> bool {
    let suffix = id
        .strip_prefix("interrupted-tool-result-")
        .and_then(|rest| rest.strip_prefix(call_id))
        .and_then(|rest| rest.strip_prefix('-'));
    suffix.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn audit_message(message: &Message) -> Result<(), Reason> {
    match &message.source {
        Some(source) => audit_source(source)?,
        None => {
            let source_kind = "(none)".to_owned();
            return Err(Reason::UnclassifiedSource { source_kind });
        }
    }
    audit_blocks(&message.content)
}

fn audit_source(source: &Source) -> Result<(), Reason> {
    let unclassified = || Reason::UnclassifiedSource {
        source_kind: source.kind.clone(),
    };
    if !SOURCE_KINDS.contains(&source.kind.as_str()) {
        return Err(unclassified());
    }
    if source.kind == "agent-message" {
        let typed_absent = source.plugin.is_none()
            && source.provider.is_none()
            && source.model.is_none()
            && source.call_id.is_none();
        if !typed_absent || !is_relay(&source.extra) {
            return Err(unclassified());
        }
    }
    Ok(())
}

/// An `agent-message` source besides its kind: exactly `form: "relay"` and a string
/// `senderSessionId`.
fn is_relay(rest: &Map<String, Value>) -> bool {
    rest.len() == 2
        && rest.get("form").and_then(Value::as_str) == Some("relay")
        && rest.get("senderSessionId").is_some_and(Value::is_string)
}

fn audit_blocks(blocks: &[ContentBlock]) -> Result<(), Reason> {
    for block in blocks {
        match block {
            ContentBlock::Other(object) => {
                let block = object.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(Reason::UnclassifiedContent {
                    block: block.to_owned(),
                });
            }
            ContentBlock::ToolResult(result) => audit_blocks(&result.content)?,
            ContentBlock::File(file) if !is_exact_file(file) => {
                let block = "file".to_owned();
                return Err(Reason::UnclassifiedContent { block });
            }
            _ => {}
        }
    }
    Ok(())
}

/// A `file` block is exactly `{type, attachment:{attachmentId, name, bytes}}`.
fn is_exact_file(file: &AttachmentBlock) -> bool {
    file.extra.is_empty() && file.offloaded.is_none() && is_exact_attachment(&file.attachment)
}

fn is_exact_attachment(attachment: &Value) -> bool {
    let Some(members) = attachment.as_object() else {
        return false;
    };
    let id = members.get("attachmentId").and_then(Value::as_str);
    members.len() == 3
        && id.is_some_and(|id| !id.is_empty())
        && members.get("name").is_some_and(Value::is_string)
        && members.get("bytes").is_some_and(Value::is_u64)
}

/// The same audit over a message kept as JSON (`agent/inbox/spliced.inserted[]`).
fn audit_opaque_message(message: &Value) -> Result<(), Reason> {
    let source_kind = message
        .get("source")
        .and_then(|s| s.get("kind"))
        .and_then(Value::as_str);
    match source_kind {
        Some(kind) if SOURCE_KINDS.contains(&kind) => {}
        other => {
            let source_kind = other.unwrap_or("(none)").to_owned();
            return Err(Reason::UnclassifiedSource { source_kind });
        }
    }
    if source_kind == Some("agent-message") {
        let rest = message.get("source").and_then(Value::as_object);
        let relay = rest.is_some_and(|s| {
            let mut rest = s.clone();
            rest.shift_remove("kind");
            is_relay(&rest)
        });
        if !relay {
            let source_kind = "agent-message".to_owned();
            return Err(Reason::UnclassifiedSource { source_kind });
        }
    }
    let content = message.get("content").and_then(Value::as_array);
    audit_opaque_blocks(content.map_or(&[][..], Vec::as_slice))
}

fn audit_opaque_blocks(blocks: &[Value]) -> Result<(), Reason> {
    for block in blocks {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        if !BLOCK_KINDS.contains(&kind) {
            let block = kind.to_owned();
            return Err(Reason::UnclassifiedContent { block });
        }
        if kind == "tool-result" {
            let nested = block.get("content").and_then(Value::as_array);
            audit_opaque_blocks(nested.map_or(&[][..], Vec::as_slice))?;
        }
        if kind == "file" {
            let exact = block.as_object().is_some_and(|members| {
                members.len() == 2 && members.get("attachment").is_some_and(is_exact_attachment)
            });
            if !exact {
                let block = "file".to_owned();
                return Err(Reason::UnclassifiedContent { block });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the repair-id grammar accepts only the canonical suffix.
    // Method: one accepted id and each way of breaking it.
    #[test]
    fn repair_id_grammar() {
        assert!(is_repair_id("interrupted-tool-result-call_1-4", "call_1"));
        assert!(!is_repair_id("interrupted-tool-result-call_1-", "call_1"));
        assert!(!is_repair_id("interrupted-tool-result-call_1-4a", "call_1"));
        assert!(!is_repair_id("interrupted-tool-result-call_2-4", "call_1"));
        assert!(!is_repair_id("tool-result-call_1-4", "call_1"));
    }

    // Goal: the file block shape is exact.
    // Method: an exact attachment, then one extra member and one empty id.
    #[test]
    fn file_attachment_shape() {
        let exact = serde_json::json!({"attachmentId": "a", "name": "n", "bytes": 3});
        assert!(is_exact_attachment(&exact));
        let extra = serde_json::json!({"attachmentId": "a", "name": "n", "bytes": 3, "x": 1});
        assert!(!is_exact_attachment(&extra));
        let empty = serde_json::json!({"attachmentId": "", "name": "n", "bytes": 3});
        assert!(!is_exact_attachment(&empty));
    }
}
