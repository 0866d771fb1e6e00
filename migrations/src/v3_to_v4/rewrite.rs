//! The per-event rewrites of the V3 -> V4 edge, on the payload as JSON (dsh-v4.md 5.3 to
//! 5.5): plugin sources become producer kinds, `tool/result` wrappers are lifted into tool
//! messages, unknown content tags move into the `plugin:` namespace, and `deferLoading` is
//! refused. Only the slots dsh's `mapEventMessages` visits are touched; nothing is searched
//! recursively.

use serde_json::{Map, Value};
use sessionlog_format::EventType;

use super::V3Reason;

/// The content-block tags V3 defines; any other tag becomes `plugin:<tag>`.
pub(super) const V3_BLOCK_TAGS: [&str; 6] = [
    "text",
    "reasoning",
    "image",
    "file",
    "tool-call",
    "tool-result",
];

/// V3 plugin names that become the V4 kind of the same name (dsh-v4.md 5.4).
const SAME_NAME_KINDS: [&str; 25] = [
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
    "model-selection",
    "plan-mode",
    "time-context",
    "tmux-context",
    "user-approval",
    "repeat-tool-reminder",
    "tool-cordis",
    "cordis-host-runner",
    "tool-goal",
    "tool-jobs",
    "hooks-codex",
    "hooks-claude-code",
    "schedule",
    "dsh-session-title-llm",
];

/// The V4 kind of a V3 plugin source (`role` is the enclosing message's): the rename table
/// of dsh-v4.md 5.4.
pub fn producer_kind(plugin: &str, role: Option<&str>) -> String {
    match plugin {
        "@deepseek-ai/dsh-system-prompt" if role == Some("system") => "system-prompt".to_owned(),
        "@deepseek-ai/dsh-system-prompt" => "runtime-context".to_owned(),
        "compact" => "compact-checkpoint".to_owned(),
        "tools-code-mode" | "tools-ptc" => "ptc-mode".to_owned(),
        "dsh-compaction-basic" => "compact-basic".to_owned(),
        name if SAME_NAME_KINDS.contains(&name) => name.to_owned(),
        other => format!("plugin:{other}"),
    }
}

/// What [`for_each_slot`] calls per message: the message and its suffix in texts.
type SlotFn<'a> = dyn FnMut(&mut Map<String, Value>, &str) -> Result<(), V3Reason> + 'a;

/// The message slots of `kind` in `data`, each as a mutable object, with the suffix that
/// names it in content errors. Slot-shape faults are refusals.
fn for_each_slot(kind: &EventType, data: &mut Value, f: &mut SlotFn<'_>) -> Result<(), V3Reason> {
    let type_name = kind.as_str();
    match kind {
        EventType::UserMessage => match data.as_object_mut() {
            Some(message) => f(message, ""),
            None => Err(V3Reason::Slot(format!("{type_name} requires a message"))),
        },
        EventType::SystemMessage
        | EventType::DeveloperMessage
        | EventType::AssistantMessage
        | EventType::ToolResult => match data.get_mut("message").and_then(Value::as_object_mut) {
            Some(message) => f(message, ""),
            None => Err(V3Reason::Slot(format!("{type_name} requires a message"))),
        },
        EventType::AgentInboxSpliced | EventType::SessionTitleLlmRequest => {
            let key = if *kind == EventType::AgentInboxSpliced {
                "inserted"
            } else {
                "messages"
            };
            let Some(list) = data.get_mut(key) else {
                return Ok(());
            };
            let Some(list) = list.as_array_mut() else {
                return Err(V3Reason::Slot(format!(
                    "{type_name} requires message array"
                )));
            };
            for (idx, message) in list.iter_mut().enumerate() {
                let Some(message) = message.as_object_mut() else {
                    return Err(V3Reason::Slot(format!(
                        "{type_name} requires message objects"
                    )));
                };
                f(message, &format!("[{idx}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Rewrites the plugin sources of every message slot (source seq `seq` in the texts).
pub(crate) fn rewrite_sources(
    kind: &EventType,
    data: &mut Value,
    seq: u64,
) -> Result<(), V3Reason> {
    for_each_slot(kind, data, &mut |message, _| {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(source) = message.get_mut("source").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        match source.get("kind") {
            Some(Value::String(k)) if !k.is_empty() => {}
            _ => return Err(V3Reason::SourceKind { seq }),
        }
        if source.get("kind") != Some(&Value::from("plugin")) {
            return Ok(());
        }
        let plugin = match source.get("plugin") {
            Some(Value::String(p)) => p.clone(),
            _ => return Err(V3Reason::PluginNotCanonical { seq }),
        };
        source.insert(
            "kind".to_owned(),
            producer_kind(&plugin, role.as_deref()).into(),
        );
        source.shift_remove("plugin");
        Ok(())
    })
}

/// Lifts a V3 `tool/result` (a user message holding one `tool-result` wrapper) into a V4 tool
/// message; any other `tool/result` passes unchanged (`seq` is the target seq).
pub(crate) fn lift_tool_result(data: &mut Value, seq: u64) -> Result<(), V3Reason> {
    let Some(message) = data.get_mut("message").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if message.get("role") != Some(&Value::from("user")) {
        return Ok(());
    }
    let wrapper_fault = || V3Reason::ToolResultWrapper { seq };
    let id_ok = matches!(message.get("id"), Some(Value::String(id)) if !id.is_empty());
    let source = message.get("source").and_then(Value::as_object);
    let call_id = source
        .filter(|s| s.get("kind") == Some(&Value::from("tool")))
        .and_then(|s| s.get("callId"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    let (Some(call_id), true) = (call_id, id_ok) else {
        return Err(wrapper_fault());
    };
    let wrapper = match message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        Some([Value::Object(wrapper)])
            if wrapper.get("type") == Some(&Value::from("tool-result"))
                && wrapper.get("toolCallId") == Some(&Value::from(call_id.as_str())) =>
        {
            wrapper.clone()
        }
        _ => return Err(wrapper_fault()),
    };
    if wrapper.get("isError").is_some_and(|v| !v.is_boolean()) {
        return Err(V3Reason::WrapperIsError { seq });
    }
    let inner = match wrapper.get("content") {
        Some(Value::Array(inner)) => inner.clone(),
        _ => return Err(V3Reason::WrapperContent { seq }),
    };
    let nested = |b: &Value| b.get("type") == Some(&Value::from("tool-result"));
    if inner.iter().any(nested) {
        return Err(V3Reason::NestedToolResult { seq });
    }
    let mut lifted = Map::new();
    lifted.insert("role".to_owned(), "tool".into());
    lifted.insert("source".to_owned(), message["source"].clone());
    lifted.insert("toolCallId".to_owned(), call_id.into());
    lifted.insert("content".to_owned(), Value::Array(inner));
    if let Some(is_error) = wrapper.get("isError") {
        lifted.insert("isError".to_owned(), is_error.clone());
    }
    lifted.insert("id".to_owned(), message["id"].clone());
    for (key, value) in message.iter() {
        if !matches!(key.as_str(), "id" | "role" | "source" | "content") {
            lifted.insert(format!("plugin:message:{key}"), value.clone());
        }
    }
    for (key, value) in &wrapper {
        if !matches!(key.as_str(), "type" | "toolCallId" | "content" | "isError") {
            lifted.insert(format!("plugin:result:{key}"), value.clone());
        }
    }
    *message = lifted;
    Ok(())
}

/// Prefixes the unknown tags of one content array; `subject` names it in the texts.
fn rename_tags(blocks: &mut Value, subject: &str) -> Result<(), V3Reason> {
    let Some(blocks) = blocks.as_array_mut() else {
        return Err(V3Reason::Content(format!(
            "{subject} content must be an array"
        )));
    };
    for block in blocks {
        let tag = match block.get("type") {
            Some(Value::String(tag)) => tag.clone(),
            _ => {
                return Err(V3Reason::Content(format!(
                    "{subject} requires content blocks with string type tags"
                )))
            }
        };
        if !V3_BLOCK_TAGS.contains(&tag.as_str()) {
            block["type"] = format!("plugin:{tag}").into();
        }
    }
    Ok(())
}

/// The content-tag migration of every place dsh's `migrateV3EventContent` visits, and the
/// `deferLoading` refusal (`seq` is the target seq).
pub(crate) fn migrate_content(
    kind: &EventType,
    data: &mut Value,
    seq: u64,
) -> Result<(), V3Reason> {
    let subject = format!("format v3 {kind} at seq {seq}");
    for_each_slot(kind, data, &mut |message, suffix| {
        let content = message.entry("content").or_insert(Value::Null);
        rename_tags(content, &format!("{subject}{suffix}.content"))
    })?;
    match kind {
        EventType::CompactionSummary => {
            for key in ["summary", "rawOutput"] {
                if let Some(blocks) = data.get_mut(key) {
                    rename_tags(blocks, &format!("{subject}.{key}"))?;
                }
            }
        }
        EventType::ToolPtcDispatch => {
            if let Some(blocks) = data.get_mut("content") {
                rename_tags(blocks, &format!("{subject}.content"))?;
            }
        }
        EventType::TeamMessageQueued => {
            if let Some(blocks) = data.get_mut("message").and_then(|m| m.get_mut("content")) {
                rename_tags(blocks, &format!("{subject}.content"))?;
            }
        }
        EventType::AssistantMessage | EventType::AssistantAttempt => {
            let records = data.get_mut("stream").and_then(Value::as_array_mut);
            for (idx, record) in records.into_iter().flatten().enumerate() {
                if record.get("type") != Some(&Value::from("chunk")) {
                    continue;
                }
                let Some(chunk) = record.get_mut("chunk") else {
                    continue;
                };
                let at = format!("{subject}.stream[{idx}]");
                match chunk.get("type").and_then(Value::as_str) {
                    Some("block-start") => match chunk.get("blockType") {
                        Some(Value::String(tag)) if !V3_BLOCK_TAGS.contains(&tag.as_str()) => {
                            chunk["blockType"] = format!("plugin:{tag}").into();
                        }
                        Some(Value::String(_)) => {}
                        _ => {
                            return Err(V3Reason::Content(format!(
                                "{at} blockType must be a string"
                            )))
                        }
                    },
                    Some("block-end") => {
                        if let Some(block) = chunk.get_mut("block") {
                            let mut one = Value::Array(vec![block.take()]);
                            rename_tags(&mut one, &format!("{at}.block"))?;
                            *block = one.as_array_mut().and_then(|a| a.pop()).unwrap_or_default();
                        }
                    }
                    _ => {}
                }
            }
        }
        EventType::RequestHeader => {
            let tools = data
                .get("header")
                .and_then(|h| h.get("tools"))
                .and_then(Value::as_array);
            if let Some(idx) = tools
                .into_iter()
                .flatten()
                .position(|t| t.get("deferLoading").is_some())
            {
                return Err(V3Reason::DeferLoading { seq, idx });
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // Goal: the rename table of dsh-v4.md 5.4, one row per class.
    #[test]
    fn producer_kinds_follow_the_table() {
        let system = "@deepseek-ai/dsh-system-prompt";
        assert_eq!(producer_kind(system, Some("system")), "system-prompt");
        assert_eq!(producer_kind(system, Some("user")), "runtime-context");
        assert_eq!(producer_kind("compact", None), "compact-checkpoint");
        assert_eq!(producer_kind("tools-code-mode", None), "ptc-mode");
        assert_eq!(producer_kind("dsh-compaction-basic", None), "compact-basic");
        assert_eq!(producer_kind("goal", None), "goal");
        assert_eq!(
            producer_kind("@knyazevai/dsh-system-prompt", Some("system")),
            "plugin:@knyazevai/dsh-system-prompt"
        );
        assert_eq!(producer_kind("", None), "plugin:");
    }

    // Goal: the lift builds dsh's key order and namespaces extra keys; a wrapper that does not
    // match its source is refused.
    #[test]
    fn lift_builds_the_tool_message() {
        let mut data = json!({"turn": 1, "step": 1, "message": {"role": "user",
            "content": [{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "ok"}],
                "isError": false, "x": 1}],
            "source": {"kind": "tool", "callId": "c"}, "id": "m", "y": 2}});
        lift_tool_result(&mut data, 7).unwrap();
        let keys: Vec<&str> = data["message"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "role",
                "source",
                "toolCallId",
                "content",
                "isError",
                "id",
                "plugin:message:y",
                "plugin:result:x"
            ]
        );
        let mut wrong = json!({"message": {"role": "user", "content": [],
            "source": {"kind": "tool", "callId": "c"}, "id": "m"}});
        assert_eq!(
            lift_tool_result(&mut wrong, 3).unwrap_err().to_string(),
            "format v3 tool/result at seq 3 requires exactly one tool-result wrapper matching its tool source"
        );
    }
}
