//! Native V4 row admission (dsh-v4.md 4, 6 "Codec decode"): what one V4 event must satisfy on
//! its own, with dsh's texts.
//!
//! dsh runs these checks on every parsed row before anything else reads it (`assertV4RowAdmission`
//! and `restoreReleasedV4Artifact`'s per-event checks), in this order: developer data,
//! producer-owned sources in the message slots, retired syntax, system-message fields, then the
//! tool-role message and the fork-result form of `tool/result`. The relationships between
//! events (the open step of a developer message, its `headerSeq` binding, the tool lifecycle)
//! are [`crate::relations`]'.
//!
//! The message slots (dsh's `mapEventMessages`) are `user/message.data`, `data.message` of
//! `system/message`, `developer/message`, `assistant/message` and `tool/result`,
//! `agent/inbox/spliced.data.inserted[]` and `session/title-llm-request.data.messages[]`.

use serde_json::Value;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType};
use crate::header::is_placeholder;
use crate::message::{ContentBlock, Message};
use crate::payload::{DeveloperMessageData, RequestHeaderData, ToolResultData};
use crate::stream::{StreamChunk, StreamRecord};

type Checked = Result<(), Violation>;

fn fail(rule: Rule, message: impl Into<String>) -> Checked {
    Err(Violation::new(rule, message))
}

/// The text a producer-owned source rule refuses with.
pub const PRODUCER_SOURCE_REFUSAL: &str = "format v4 message requires a producer-owned source kind";

/// The text of an invalid fork-generated not-started result.
pub const FORK_RESULT_REFUSAL: &str = "invalid V4 not-started fork result";

/// The id prefix of a fork-generated not-started result.
pub const FORK_RESULT_PREFIX: &str = "forked-tool-result-";

/// The media types a V4 image attachment may have (dsh-v4.md 4.5).
const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Checks the V4 row rules of one known, non-opaque event.
pub(crate) fn check_row(event: &Event) -> Checked {
    match &event.data {
        EventData::DeveloperMessage(data) => check_developer(data)?,
        // The decoder keeps a developer payload it cannot type as it is (`event::DataSeed`).
        EventData::Other(data) if event.kind == crate::EventType::DeveloperMessage => {
            let message = if data.is_object() {
                "format v4 developer/message requires turn, step, and a developer message"
            } else {
                "format v4 developer/message data must be an object"
            };
            return fail(Rule::DeveloperMessage, message);
        }
        _ => {}
    }
    check_sources(event)?;
    check_retired(event)?;
    match &event.data {
        EventData::SystemMessage(data) => check_system(data.turn, data.step, &data.message)?,
        EventData::ToolResult(data) => check_tool_result(event, data)?,
        EventData::RequestHeader(data) => check_defer_loading(data)?,
        _ => {}
    }
    Ok(())
}

/// Whether a source object (a JSON value) has a producer-owned kind.
fn is_producer_kind(kind: Option<&str>) -> bool {
    kind.is_some_and(|k| !k.is_empty() && k != "plugin")
}

/// Producer-owned sources in every message slot but the developer's (checked with its own
/// text), and the developer role only on a developer message.
fn check_sources(event: &Event) -> Checked {
    if let Some(message) = event.message() {
        if !matches!(event.data, EventData::DeveloperMessage(_)) {
            let kind = message.source.as_ref().map(|s| s.kind.as_str());
            if !is_producer_kind(kind) {
                return fail(Rule::ProducerSource, PRODUCER_SOURCE_REFUSAL);
            }
            if message.role.as_deref() == Some("developer") {
                return fail(
                    Rule::DeveloperMessage,
                    "format v4 developer/message and developer role must occur together",
                );
            }
        }
    }
    for message in value_messages(event) {
        let kind = message
            .get("source")
            .and_then(|s| s.get("kind"))
            .and_then(Value::as_str);
        if !is_producer_kind(kind) {
            return fail(Rule::ProducerSource, PRODUCER_SOURCE_REFUSAL);
        }
        if message.get("role").and_then(Value::as_str) == Some("developer") {
            return fail(
                Rule::DeveloperMessage,
                "format v4 developer/message and developer role must occur together",
            );
        }
    }
    Ok(())
}

/// The messages an opaque payload carries in a message slot.
fn value_messages(event: &Event) -> impl Iterator<Item = &Value> {
    let key = match event.kind {
        EventType::AgentInboxSpliced => Some("inserted"),
        EventType::SessionTitleLlmRequest => Some("messages"),
        _ => None,
    };
    let list = match (&event.data, key) {
        (EventData::Other(data), Some(key)) => data.get(key).and_then(Value::as_array),
        _ => None,
    };
    list.into_iter().flatten()
}

/// The tag of a tool-change block, when `tag` is one.
fn is_tool_change(tag: &str) -> bool {
    tag == "tool-addition" || tag == "tool-removal"
}

/// Retired syntax: `tool-result` wrappers and tool-change blocks outside their places, and
/// `header.system`. The system message's own content is left to [`check_system`], which
/// words it.
fn check_retired(event: &Event) -> Checked {
    let kind = &event.kind;
    let wrapper = || {
        fail(
            Rule::RowAdmission,
            format!(
                "format v4 {kind} at seq {} content must not contain a released tool-result \
                 wrapper",
                event.seq
            ),
        )
    };
    let developer = matches!(event.data, EventData::DeveloperMessage(_));
    if let Some(message) = event.message() {
        if matches!(event.data, EventData::SystemMessage(_)) {
            return Ok(());
        }
        for block in &message.content {
            let tag = block.tag();
            if matches!(block, ContentBlock::ToolResult(_)) {
                return wrapper();
            }
            if is_tool_change(tag) && !developer {
                return fail(
                    Rule::RowAdmission,
                    format!("format v4 {tag} requires developer role"),
                );
            }
        }
    }
    for message in value_messages(event) {
        let blocks = message.get("content").and_then(Value::as_array);
        for tag in blocks.into_iter().flatten().filter_map(block_tag) {
            if tag == "tool-result" {
                return wrapper();
            }
            if is_tool_change(tag) {
                return fail(
                    Rule::RowAdmission,
                    format!("format v4 {tag} requires developer role"),
                );
            }
        }
    }
    match &event.data {
        EventData::CompactionSummary(d) => {
            for blocks in [Some(&d.summary), d.raw_output.as_ref()]
                .into_iter()
                .flatten()
            {
                let blocks = blocks.as_array().into_iter().flatten();
                for tag in blocks.filter_map(block_tag) {
                    if tag == "tool-result" {
                        return wrapper();
                    }
                    if is_tool_change(tag) {
                        return tool_change_outside();
                    }
                }
            }
        }
        EventData::AssistantMessage(d) if stream_has_tool_change(d.stream.as_deref()) => {
            return tool_change_outside();
        }
        EventData::AssistantAttempt(d) if stream_has_tool_change(Some(&d.stream)) => {
            return tool_change_outside();
        }
        EventData::RequestHeader(d) if d.header.system.is_some() => {
            return fail(
                Rule::RowAdmission,
                "format v4 request/header rejects retired header.system",
            );
        }
        _ => {}
    }
    Ok(())
}

fn tool_change_outside() -> Checked {
    fail(
        Rule::RowAdmission,
        "format v4 tool-change blocks require developer role",
    )
}

fn block_tag(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// A `block-start` chunk whose `blockType`, or a `block-end` chunk whose `block`, is a
/// tool-change block.
fn stream_has_tool_change(stream: Option<&[StreamRecord]>) -> bool {
    stream.into_iter().flatten().any(|record| match record {
        StreamRecord::Chunk(raw) => match &raw.chunk {
            StreamChunk::BlockStart(start) => is_tool_change(&start.block_type),
            StreamChunk::BlockEnd(end) => is_tool_change(end.block.tag()),
            _ => false,
        },
        _ => false,
    })
}

/// `system/message` field checks (dsh's `system-message.ts`): positive turn and step, a
/// system role, a non-empty id, and content blocks of known shapes; extra keys are allowed.
fn check_system(turn: u64, step: u64, message: &Message) -> Checked {
    let refuse = |text: String| fail(Rule::RowAdmission, text);
    if turn == 0 {
        return refuse("format v4 system/message turn must be positive".to_owned());
    }
    if step == 0 {
        return refuse("format v4 system/message step must be positive".to_owned());
    }
    if message.role.as_deref() != Some("system") {
        return refuse("format v4 system message requires system role".to_owned());
    }
    if message.id.as_deref().is_none_or(str::is_empty) {
        return refuse("format v4 system message id requires a string with content".to_owned());
    }
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(_) => {
                return refuse(
                    "format v4 system content rejects retired tool-result wrappers".to_owned(),
                )
            }
            ContentBlock::ToolCall(call) if call.id.is_empty() || call.name.is_empty() => {
                return refuse(
                    "format v4 system tool-call requires a string with content".to_owned(),
                );
            }
            ContentBlock::Image(image) => {
                let media = image.attachment.get("mediaType").and_then(Value::as_str);
                if !media.is_some_and(|m| IMAGE_MEDIA_TYPES.contains(&m)) {
                    return refuse(
                        "format v4 system image requires a supported mediaType".to_owned(),
                    );
                }
                let id = image.attachment.get("attachmentId").and_then(Value::as_str);
                if id.is_none_or(str::is_empty) {
                    return refuse(
                        "format v4 system image attachmentId requires a string with content"
                            .to_owned(),
                    );
                }
            }
            ContentBlock::Other(_) if block.tag().is_empty() => {
                return refuse(
                    "format v4 system content block type requires a string with content".to_owned(),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// The tool-role message of a V4 `tool/result` (dsh's `assertV4ToolResultMessage`), then the
/// fork-generated not-started form when the id claims it.
fn check_tool_result(event: &Event, data: &ToolResultData) -> Checked {
    let message = &data.message;
    let shape = |text: &str| {
        fail(
            Rule::ToolRole,
            format!("format v4 tool/result at seq {} {text}", event.seq),
        )
    };
    if message.id.as_deref().is_none_or(str::is_empty) {
        return shape("message requires a nonempty id");
    }
    if message.role.as_deref() != Some("tool") {
        return shape("message requires tool role");
    }
    let source = message.source.as_ref();
    let call_id = match source.map(|s| (s.kind.as_str(), s.call_id.as_deref())) {
        Some(("tool", Some(id))) if !id.is_empty() => id,
        _ => return shape("message requires a tool source with a nonempty callId"),
    };
    match message.extra.get("toolCallId") {
        Some(Value::String(id)) if id == call_id => {}
        Some(Value::String(id)) if !id.is_empty() => {
            return shape("message toolCallId must equal source.callId")
        }
        _ => return shape("message requires a nonempty toolCallId"),
    }
    let is_error = match message.extra.get("isError") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return shape("message isError must be boolean"),
    };
    if data.error.is_some() && is_error != Some(true) {
        return shape("carries error metadata for a non-error tool result");
    }
    let id = message.id.as_deref().unwrap_or("");
    if id.starts_with(FORK_RESULT_PREFIX) {
        check_fork_result(event, data, call_id, is_error)?;
    }
    Ok(())
}

/// The exact fork-generated not-started result (dsh's `fork-result.ts`): its id names the call
/// and a seq (its own when appended, the replaced one's otherwise), with the not-started error
/// and one text block.
fn check_fork_result(
    event: &Event,
    data: &ToolResultData,
    call_id: &str,
    is_error: Option<bool>,
) -> Checked {
    let invalid = || fail(Rule::ForkResult, FORK_RESULT_REFUSAL);
    let id = data.message.id.as_deref().unwrap_or("");
    let suffix = id
        .strip_prefix(FORK_RESULT_PREFIX)
        .and_then(|rest| rest.strip_prefix(call_id))
        .and_then(|rest| rest.strip_prefix('-'));
    let Some(n) = suffix.and_then(canonical_count) else {
        return invalid();
    };
    let error = data.error.as_ref().and_then(Value::as_object);
    let error_ok = error.is_some_and(|e| {
        e.get("name").and_then(Value::as_str) == Some("ToolNotStartedError")
            && e.get("code").and_then(Value::as_str) == Some("TOOL_NOT_STARTED")
    });
    let content_ok = matches!(data.message.content.as_slice(), [ContentBlock::Text(_)]);
    let placement_ok = match event.surface_op {
        Some(crate::event::SurfaceOp::Append) => {
            n == event.seq && event.source_event_seqs.is_none()
        }
        Some(crate::event::SurfaceOp::Replace { .. }) => {
            n < event.seq && event.source_event_seqs.as_deref() == Some(&[n][..])
        }
        None => false,
    };
    if !(error_ok && content_ok && placement_ok && is_error == Some(true)) {
        return invalid();
    }
    Ok(())
}

/// A canonical decimal safe integer (no sign, no leading zero).
pub(crate) fn canonical_count(s: &str) -> Option<u64> {
    let canonical = s == "0" || (!s.starts_with('0') && !s.is_empty());
    if !canonical || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>()
        .ok()
        .filter(|n| *n <= crate::json::SAFE_INTEGER_MAX)
}

/// The developer message on its own (dsh's `developer.ts`): positive turn and step, a
/// developer role with an id and a producer-owned source, tool-change blocks with names and
/// no inline definitions, and `headerSeq` exactly when a tool is added.
fn check_developer(data: &DeveloperMessageData) -> Checked {
    let refuse = |text: &str| fail(Rule::DeveloperMessage, text);
    if data.turn == 0 {
        return refuse("developer/message turn must be positive");
    }
    if data.step == 0 {
        return refuse("developer/message step must be positive");
    }
    let message = &data.message;
    let kind = message.source.as_ref().map(|s| s.kind.as_str());
    if message.role.as_deref() != Some("developer")
        || message.id.as_deref().is_none_or(str::is_empty)
        || !is_producer_kind(kind)
    {
        return refuse(
            "format v4 developer message requires id, role, content, and a producer-owned source",
        );
    }
    let mut additions = false;
    for block in &message.content {
        let ContentBlock::Other(object) = block else {
            continue;
        };
        let tag = block.tag();
        if !is_tool_change(tag) {
            continue;
        }
        let name = object.get("toolName").and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            return fail(
                Rule::DeveloperMessage,
                format!("format v4 {tag} requires a nonempty toolName"),
            );
        }
        if tag == "tool-addition" {
            additions = true;
            if object.contains_key("tool") {
                return refuse("format v4 tool-addition must omit inline tool definitions");
            }
        }
    }
    match (&data.header_seq, additions) {
        (Some(_), false) => {
            refuse("format v4 developer/message must omit headerSeq without tool additions")
        }
        (None, true) => refuse("developer/message headerSeq must be a non-negative safe integer"),
        (Some(seq), true) if header_seq(seq).is_none() => {
            refuse("developer/message headerSeq must be a non-negative safe integer")
        }
        _ => Ok(()),
    }
}

/// `headerSeq` as a count, when it is one.
pub(crate) fn header_seq(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .filter(|n| *n <= crate::json::SAFE_INTEGER_MAX)
}

/// `deferLoading`, new in V4, is exactly `true` when present.
fn check_defer_loading(data: &RequestHeaderData) -> Checked {
    let Some(Value::Array(tools)) = &data.header.tools else {
        return Ok(());
    };
    for tool in tools {
        if let Some(defer) = tool.get("deferLoading") {
            if defer != &Value::Bool(true) {
                return fail(
                    Rule::Payload,
                    "format v4 tool deferLoading must be true when present",
                );
            }
        }
    }
    Ok(())
}

/// The tool names a header's `tools` list defines completely (a string `description` and an
/// object `parameters`), with how often each name occurs: the `headerSeq` binding of a
/// developer message (dsh-v4.md 4.4). A `{{tools}}` placeholder or a list of names (normalized
/// recordings) defines nothing and is reported as `None`.
pub fn header_tools(data: &RequestHeaderData) -> Option<Vec<(String, bool)>> {
    let Some(Value::Array(tools)) = &data.header.tools else {
        return match &data.header.tools {
            None => Some(Vec::new()),
            Some(Value::String(s)) if is_placeholder(s) => None,
            Some(_) => Some(Vec::new()),
        };
    };
    if tools.iter().all(Value::is_string) && !tools.is_empty() {
        return None;
    }
    let entries = tools.iter().filter_map(|tool| {
        let name = tool.get("name").and_then(Value::as_str)?;
        let complete = tool.get("description").is_some_and(Value::is_string)
            && tool.get("parameters").is_some_and(Value::is_object);
        Some((name.to_owned(), complete))
    });
    Some(entries.collect())
}

/// A valid `subagent/catalog` fact (dsh's `facts.ts`): version 0 (`continuable` or `one-shot`),
/// version 1 (also `unknown`) or version 2 (`external`, a later V4 addition); a string
/// `childId`; a count `childCreatedAt`; a string `label`, required for `continuable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogFact {
    pub child_id: String,
    pub child_created_at: u64,
    pub mode: String,
    pub label: Option<String>,
}

/// The text of an invalid catalog fact.
pub const CATALOG_FACT_REFUSAL: &str =
    "subagent/catalog requires a supported versioned catalog fact";

/// The catalog fact `value` states, if it is a valid one.
pub fn catalog_fact(value: &Value) -> Option<CatalogFact> {
    let fact = value.as_object()?;
    let version = fact.get("version").and_then(Value::as_u64)?;
    let child_id = fact.get("childId").and_then(Value::as_str)?.to_owned();
    let mode = fact.get("mode").and_then(Value::as_str)?.to_owned();
    let mode_ok = match version {
        0 => mode == "continuable" || mode == "one-shot",
        1 => matches!(mode.as_str(), "continuable" | "one-shot" | "unknown"),
        2 => mode == "external",
        _ => false,
    };
    let label = match fact.get("label") {
        None => None,
        Some(Value::String(label)) => Some(label.clone()),
        Some(_) => return None,
    };
    if !mode_ok || (mode == "continuable" && label.is_none()) {
        return None;
    }
    let child_created_at = fact
        .get("childCreatedAt")
        .and_then(Value::as_u64)
        .filter(|n| *n <= crate::json::SAFE_INTEGER_MAX)?;
    Some(CatalogFact {
        child_id,
        child_created_at,
        mode,
        label,
    })
}
