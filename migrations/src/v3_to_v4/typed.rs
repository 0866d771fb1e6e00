//! The V3 -> V4 payload rewrites of `rewrite.rs` on the typed payload, without the
//! `serde_json::Value` round trip.
//!
//! The JSON rewrites take a payload to a tree ([`EventData::to_value`]), rewrite the tree and
//! decode it again ([`EventData::from_value`]). Decoding the encoding of a decoded payload
//! gives that payload back (known members in their fields, unknown ones in input order), so
//! where the tree rewrite succeeds, applying the same changes to the typed fields gives the
//! same event. [`rewrite`] does that when it can prove the tree rewrite succeeds: every slot
//! shape the tree rewrite refuses (an empty source kind, a plugin source without a plugin
//! name, a `tool/result` wrapper that does not match, a `deferLoading` tool, a payload not in
//! its typed form) makes it return `false` with the payload untouched, and the caller then
//! runs the tree rewrite, which refuses with its own text. The unit tests compare both paths
//! event by event on generated logs and on hand-made shapes.

use serde_json::Value;
use sessionlog_format::stream::{StreamChunk, StreamRecord};
use sessionlog_format::{check_lossless, ContentBlock, EventData, EventType, Extra, Message};

use super::rewrite::{producer_kind, V3_BLOCK_TAGS};

/// Applies the V3 -> V4 payload rewrites of a `kind` event whose references need no remap,
/// in place; `false` (and `data` unchanged) when the tree rewrite must decide.
pub(super) fn rewrite(kind: &EventType, data: &mut EventData) -> bool {
    if !applies(kind, data) {
        return false;
    }
    apply(data);
    true
}

/// The payload needs no change at all: [`rewrite`] would return `true` and leave it as it is.
pub(super) fn unchanged(kind: &EventType, data: &EventData) -> bool {
    applies(kind, data) && !changes(data)
}

/// The tree rewrite of this payload succeeds and [`apply`] does what it does.
fn applies(kind: &EventType, data: &EventData) -> bool {
    match (kind, data) {
        (EventType::UserMessage, EventData::UserMessage(m)) => slot_ok(m),
        (EventType::SystemMessage, EventData::SystemMessage(d)) => slot_ok(&d.message),
        (EventType::DeveloperMessage, EventData::DeveloperMessage(d)) => slot_ok(&d.message),
        (EventType::AssistantMessage, EventData::AssistantMessage(d)) => slot_ok(&d.message),
        // Stream records always have the typed shapes the tree rewrite accepts.
        (EventType::AssistantAttempt, EventData::AssistantAttempt(_)) => true,
        (EventType::ToolResult, EventData::ToolResult(d)) => {
            slot_ok(&d.message) && (!is_user(&d.message) || lift_ok(&d.message))
        }
        (EventType::CompactionSummary, EventData::CompactionSummary(d)) => {
            tags_ok(&d.summary) && d.raw_output.as_ref().is_none_or(tags_ok)
        }
        (EventType::RequestHeader, EventData::RequestHeader(d)) => match &d.header.tools {
            Some(Value::Array(tools)) => !tools.iter().any(|t| t.get("deferLoading").is_some()),
            _ => true,
        },
        // The other rewritten types keep their payload as a tree: the tree rewrite runs.
        (
            EventType::UserMessage
            | EventType::SystemMessage
            | EventType::DeveloperMessage
            | EventType::AssistantMessage
            | EventType::AssistantAttempt
            | EventType::ToolResult
            | EventType::CompactionSummary
            | EventType::RequestHeader
            | EventType::AgentInboxSpliced
            | EventType::SessionTitleLlmRequest
            | EventType::ToolPtcDispatch
            | EventType::TeamMessageQueued,
            _,
        ) => false,
        // Untouched types: the tree decodes back to the same payload when it has the shape
        // the decoder gives `kind` (an opaque one passing the decoder's lossless check).
        _ => decodes_as(kind, data),
    }
}

/// `data` is what [`EventData::from_value`] makes of a payload of `kind`.
fn decodes_as(kind: &EventType, data: &EventData) -> bool {
    let EventData::Other(value) = data else {
        return data.typed_kind().as_ref() == Some(kind);
    };
    !typed_kind(kind) && check_lossless(value).is_ok()
}

/// The types whose payload [`EventData::from_value`] decodes typed (or, for
/// `developer/message`, may).
fn typed_kind(kind: &EventType) -> bool {
    matches!(
        kind,
        EventType::TurnStart
            | EventType::TurnEnd
            | EventType::StepStart
            | EventType::StepEnd
            | EventType::SystemMessage
            | EventType::DeveloperMessage
            | EventType::UserMessage
            | EventType::AssistantMessage
            | EventType::AssistantAttempt
            | EventType::AssistantChunk
            | EventType::ToolCall
            | EventType::ToolResult
            | EventType::RequestHeader
            | EventType::RequestContext
            | EventType::SessionEndSeed
            | EventType::CompactionStart
            | EventType::CompactionSummary
            | EventType::CompactionPrune
            | EventType::CompactionEnd
            | EventType::ImageOffload
    )
}

/// A message slot whose source the tree rewrite accepts (a non-empty kind; a plugin source
/// names its plugin) and whose content blocks all have string tags.
fn slot_ok(message: &Message) -> bool {
    let source_ok = message
        .source
        .as_ref()
        .is_none_or(|s| !s.kind.is_empty() && (s.kind != "plugin" || s.plugin.is_some()));
    source_ok && message.content.iter().all(block_tag_ok)
}

fn block_tag_ok(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Other(object) => matches!(object.get("type"), Some(Value::String(_))),
        _ => true,
    }
}

fn is_user(message: &Message) -> bool {
    message.role.as_deref() == Some("user")
}

/// A V3 `tool/result` user message the lift accepts: a non-empty id, a `tool` source with a
/// non-empty call id, exactly one `tool-result` wrapper for that call, holding no nested
/// `tool-result`. (The source is checked after its rewrite: a plugin source never becomes
/// `tool`.)
fn lift_ok(message: &Message) -> bool {
    let id_ok = message.id.as_deref().is_some_and(|id| !id.is_empty());
    let call_id = message
        .source
        .as_ref()
        .filter(|s| s.kind == "tool")
        .and_then(|s| s.call_id.as_deref())
        .filter(|c| !c.is_empty());
    let (Some(call_id), true) = (call_id, id_ok) else {
        return false;
    };
    match message.content.as_slice() {
        [ContentBlock::ToolResult(wrapper)] => {
            wrapper.tool_call_id == call_id
                && !wrapper
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult(_)))
        }
        _ => false,
    }
}

/// A tree content array whose blocks all carry a string `type`.
fn tags_ok(blocks: &Value) -> bool {
    blocks.as_array().is_some_and(|blocks| {
        blocks
            .iter()
            .all(|b| matches!(b.get("type"), Some(Value::String(_))))
    })
}

/// Whether [`apply`] would change an accepted payload.
fn changes(data: &EventData) -> bool {
    match data {
        EventData::UserMessage(m) => slot_changes(m),
        EventData::SystemMessage(d) => slot_changes(&d.message),
        EventData::DeveloperMessage(d) => slot_changes(&d.message),
        EventData::AssistantMessage(d) => {
            slot_changes(&d.message) || d.stream.as_deref().is_some_and(stream_changes)
        }
        EventData::AssistantAttempt(d) => stream_changes(&d.stream),
        EventData::ToolResult(d) => is_user(&d.message) || slot_changes(&d.message),
        EventData::CompactionSummary(d) => {
            tree_tags_change(&d.summary) || d.raw_output.as_ref().is_some_and(tree_tags_change)
        }
        _ => false,
    }
}

fn slot_changes(message: &Message) -> bool {
    message.source.as_ref().is_some_and(|s| s.kind == "plugin")
        || message.content.iter().any(block_renamed)
}

fn block_renamed(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Other(object) if renamed_tag(object).is_some())
}

fn stream_changes(stream: &[StreamRecord]) -> bool {
    stream.iter().any(|record| match record {
        StreamRecord::Chunk(raw) => match &raw.chunk {
            StreamChunk::BlockStart(start) => !V3_BLOCK_TAGS.contains(&start.block_type.as_str()),
            StreamChunk::BlockEnd(end) => block_renamed(&end.block),
            _ => false,
        },
        _ => false,
    })
}

fn tree_tags_change(blocks: &Value) -> bool {
    blocks.as_array().is_some_and(|blocks| {
        blocks.iter().any(|b| {
            b.get("type")
                .and_then(Value::as_str)
                .is_some_and(|tag| !V3_BLOCK_TAGS.contains(&tag))
        })
    })
}

/// The rewrites of an accepted payload, in the tree rewrite's order: sources, the lift, then
/// the content tags.
fn apply(data: &mut EventData) {
    match data {
        EventData::UserMessage(m) => apply_slot(m),
        EventData::SystemMessage(d) => apply_slot(&mut d.message),
        EventData::DeveloperMessage(d) => apply_slot(&mut d.message),
        EventData::AssistantMessage(d) => {
            apply_slot(&mut d.message);
            if let Some(stream) = &mut d.stream {
                apply_stream(stream);
            }
        }
        EventData::AssistantAttempt(d) => apply_stream(&mut d.stream),
        EventData::ToolResult(d) => {
            rewrite_source(&mut d.message);
            if is_user(&d.message) {
                lift(&mut d.message);
            }
            rename_blocks(&mut d.message.content);
        }
        EventData::CompactionSummary(d) => {
            rename_tree_tags(&mut d.summary);
            if let Some(raw) = &mut d.raw_output {
                rename_tree_tags(raw);
            }
        }
        _ => {}
    }
}

fn apply_slot(message: &mut Message) {
    rewrite_source(message);
    rename_blocks(&mut message.content);
}

/// A plugin source becomes its producer kind (dsh-v4.md 5.4); `plugin` goes.
fn rewrite_source(message: &mut Message) {
    let role = message.role.as_deref();
    let Some(source) = message.source.as_mut().filter(|s| s.kind == "plugin") else {
        return;
    };
    if let Some(plugin) = source.plugin.take() {
        source.kind = producer_kind(&plugin, role);
    }
}

/// The V4 tool message of an accepted V3 `tool/result` user message, with the tree lift's
/// member order: the typed members, then `toolCallId`, `isError`, the message's unknown
/// members as `plugin:message:*` and the wrapper's as `plugin:result:*`.
fn lift(message: &mut Message) {
    let Some(ContentBlock::ToolResult(wrapper)) = message.content.pop() else {
        return;
    };
    let mut extra = Extra::new();
    extra.insert("toolCallId".to_owned(), Value::String(wrapper.tool_call_id));
    if let Some(is_error) = wrapper.is_error {
        extra.insert("isError".to_owned(), Value::Bool(is_error));
    }
    for (key, value) in std::mem::take(&mut message.extra) {
        extra.insert(format!("plugin:message:{key}"), value);
    }
    for (key, value) in wrapper.extra {
        extra.insert(format!("plugin:result:{key}"), value);
    }
    message.role = Some("tool".to_owned());
    message.content = wrapper.content;
    message.extra = extra;
}

fn apply_stream(stream: &mut [StreamRecord]) {
    for record in stream {
        let StreamRecord::Chunk(raw) = record else {
            continue;
        };
        match &mut raw.chunk {
            StreamChunk::BlockStart(start)
                if !V3_BLOCK_TAGS.contains(&start.block_type.as_str()) =>
            {
                start.block_type = format!("plugin:{}", start.block_type);
            }
            StreamChunk::BlockEnd(end) => rename_block(&mut end.block),
            _ => {}
        }
    }
}

fn rename_blocks(blocks: &mut [ContentBlock]) {
    blocks.iter_mut().for_each(rename_block);
}

/// An unknown tag moves into the `plugin:` namespace (dsh-v4.md 5.5); `type` keeps its place.
fn rename_block(block: &mut ContentBlock) {
    if let ContentBlock::Other(object) = block {
        if let Some(renamed) = renamed_tag(object) {
            object.insert("type".to_owned(), Value::String(renamed));
        }
    }
}

fn renamed_tag(object: &Extra) -> Option<String> {
    match object.get("type") {
        Some(Value::String(tag)) if !V3_BLOCK_TAGS.contains(&tag.as_str()) => {
            Some(format!("plugin:{tag}"))
        }
        _ => None,
    }
}

fn rename_tree_tags(blocks: &mut Value) {
    let Some(blocks) = blocks.as_array_mut() else {
        return;
    };
    for block in blocks {
        let renamed = match block.get("type") {
            Some(Value::String(tag)) if !V3_BLOCK_TAGS.contains(&tag.as_str()) => {
                format!("plugin:{tag}")
            }
            _ => continue,
        };
        if let Some(object) = block.as_object_mut() {
            object.insert("type".to_owned(), Value::String(renamed));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use sessionlog_format::gen::{GenOptions, Generator};
    use sessionlog_format::row::encode_row;
    use sessionlog_format::{Event, FormatVersion};

    use super::super::rewrite::{lift_tool_result, migrate_content, rewrite_sources};
    use super::super::{V3Reason, V3ToV4};
    use super::*;
    use crate::catalog::{Stage, StageOptions};

    /// The tree rewrite of one payload, as the edge ran it before the typed one.
    fn tree(kind: &EventType, data: &EventData, seq: u64) -> Result<EventData, V3Reason> {
        let mut value = data.to_value();
        rewrite_sources(kind, &mut value, seq)?;
        if *kind == EventType::ToolResult {
            lift_tool_result(&mut value, seq)?;
        }
        migrate_content(kind, &mut value, seq)?;
        EventData::from_value(kind, value)
            .map_err(|e| V3Reason::Content(format!("format v3 {kind} at seq {seq}: {e}")))
    }

    /// Compares the typed rewrite of one payload with the tree one; `true` when the typed one
    /// decided.
    fn same_as_tree(kind: &EventType, data: &EventData) -> bool {
        let expected = tree(kind, data, 7);
        let mut typed = data.clone();
        let decided = rewrite(kind, &mut typed);
        if decided {
            assert_eq!(Ok(&typed), expected.as_ref(), "{kind}");
        } else {
            assert_eq!(
                &typed, data,
                "{kind}: left untouched when the tree rewrite decides"
            );
        }
        if unchanged(kind, data) {
            assert_eq!(Ok(data), expected.as_ref(), "{kind}: unchanged");
        }
        decided
    }

    // Goal: on generated V3 logs the typed rewrites give every payload the tree rewrite gives,
    // the stage's events are the same event for event and row for row whichever path it
    // takes (and through `push_shared`), and the typed path decides nearly every event.
    // Method: three seeds of 3,000 events; one stage per path fed the same events.
    #[test]
    fn typed_rewrites_equal_the_tree_ones_on_generated_logs() {
        for seed in [1, 7, 0xbeef] {
            let options = GenOptions {
                events: 3_000,
                seed,
            };
            let mut generator = Generator::for_version(options, FormatVersion::V3).unwrap();
            let header = generator.header();
            let mut typed_stage = V3ToV4::new(StageOptions::default());
            let mut tree_stage = V3ToV4::new(StageOptions::default());
            tree_stage.typed = false;
            let mut shared_stage = V3ToV4::new(StageOptions::default());
            for stage in [&mut typed_stage, &mut tree_stage, &mut shared_stage] {
                stage.header(header.clone()).unwrap();
            }
            let (mut typed_out, mut tree_out, mut shared_out) =
                (Vec::new(), Vec::new(), Vec::new());
            let (mut events, mut decided, mut passed_shared) = (0, 0, 0);
            while let Some(batch) = generator.next_batch() {
                for event in batch {
                    events += 1;
                    decided += usize::from(same_as_tree(&event.kind, &event.data));
                    let shared = Arc::new(event.clone());
                    let before = shared_out.len();
                    shared_stage
                        .push_shared(Arc::clone(&shared), &mut shared_out)
                        .unwrap();
                    passed_shared += shared_out[before..]
                        .iter()
                        .filter(|e| Arc::ptr_eq(e, &shared))
                        .count();
                    tree_stage.push(event.clone(), &mut tree_out).unwrap();
                    typed_stage.push(event, &mut typed_out).unwrap();
                }
            }
            for stage in [&mut typed_stage, &mut tree_stage, &mut shared_stage] {
                let mut tail = Vec::new();
                stage.finish(&mut tail).unwrap();
            }
            assert_eq!(typed_out, tree_out, "seed {seed}");
            let shared_out: Vec<Event> = shared_out.iter().map(|e| Event::clone(e)).collect();
            assert_eq!(shared_out, tree_out, "seed {seed}");
            for (typed, tree) in typed_out.iter().zip(&tree_out) {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                encode_row(typed, FormatVersion::V4, &mut a);
                encode_row(tree, FormatVersion::V4, &mut b);
                assert_eq!(a, b, "seed {seed}");
            }
            assert!(
                decided * 100 >= events * 99,
                "seed {seed}: {decided} of {events}"
            );
            assert!(
                passed_shared * 2 >= events,
                "seed {seed}: {passed_shared} of {events} shared"
            );
        }
    }

    fn payload(kind: &EventType, value: Value) -> EventData {
        EventData::from_value(kind, value).unwrap()
    }

    // Goal: every rewrite the typed path does matches the tree rewrite on the shapes that
    // trigger it (plugin sources, unknown tags in messages, streams and summaries, the
    // tool-result lift with its namespaced members), and every shape the tree rewrite refuses
    // is left to it untouched.
    // Method: hand-made payloads through `same_as_tree`, which also checks `unchanged`.
    #[test]
    fn typed_rewrites_equal_the_tree_ones_on_every_rewritten_shape() {
        let text = json!({"type": "text", "text": "hi"});
        let odd = json!({"type": "odd", "x": [1, {"y": null}]});
        let user = EventType::UserMessage;
        let system = EventType::SystemMessage;
        let assistant = EventType::AssistantMessage;
        let tool = EventType::ToolResult;
        let decided = [
            (
                &system,
                json!({"turn": 0, "step": 0, "message": {"id": "s", "role": "system",
                    "content": [text], "source": {"kind": "plugin",
                    "plugin": "@deepseek-ai/dsh-system-prompt", "form": 1}}}),
            ),
            (
                &user,
                json!({"id": "u", "role": "user", "content": [text, odd], "source": {"kind":
                    "plugin", "plugin": "someone-else"}, "more": true}),
            ),
            (
                &user,
                json!({"id": "u", "role": "user", "content": [text], "source": {"kind": "user"}}),
            ),
            (
                &assistant,
                json!({"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
                    "content": [odd]}, "stream": [
                    {"type": "chunk", "time": 1, "chunk": {"type": "block-start", "index": 0,
                        "blockType": "odd"}},
                    {"type": "chunk", "time": 2, "chunk": {"type": "block-start", "index": 1,
                        "blockType": "text"}},
                    {"type": "chunk", "time": 3, "chunk": {"type": "block-end", "index": 0,
                        "block": odd}},
                    {"type": "chunk", "time": 4, "chunk": {"type": "block-end", "index": 1,
                        "block": text}},
                    {"type": "text-chunks", "time0": 1, "index": 1, "dt": [], "texts": ["hi"]},
                    {"type": "mystery", "chunk": {"type": "block-start", "blockType": "odd"}}]}),
            ),
            (
                &EventType::AssistantAttempt,
                json!({"turn": 1, "step": 2, "stream": [{"type": "chunk", "time": 1,
                    "chunk": {"type": "block-end", "index": 0, "block": odd}}]}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": "c", "content": [text, odd],
                        "isError": true, "w": 1}],
                    "source": {"kind": "tool", "callId": "c", "z": 0}, "m": "x"},
                    "meta": {"k": 1}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": "c", "content": []}],
                    "source": {"kind": "tool", "callId": "c"}}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "tool",
                    "content": [odd], "source": {"kind": "plugin", "plugin": "goal"}}}),
            ),
            (
                &EventType::CompactionSummary,
                json!({"compactionId": "k", "summary": [text, odd], "shadowedRange":
                    {"start": 1, "end": 2}, "shadowedSeqs": [1, 2], "shadowedTokenCount": 3,
                    "provider": "p", "model": "m", "rawOutput": [odd]}),
            ),
            (
                &EventType::RequestHeader,
                json!({"header": {"config": {"model": "m"}, "tools": [{"name": "t"}]},
                    "reason": "r"}),
            ),
            (&EventType::TurnStart, json!({"turn": 3, "x": 1})),
            (&EventType::parse("x/y"), json!({"any": [1]})),
        ];
        for (kind, value) in decided {
            assert!(
                same_as_tree(kind, &payload(kind, value.clone())),
                "{kind}: {value}"
            );
        }
        let left_to_the_tree = [
            (
                &user,
                json!({"id": "u", "role": "user", "content": [], "source": {"kind": ""}}),
            ),
            (
                &user,
                json!({"id": "u", "role": "user", "content": [], "source": {"kind": "plugin"}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": "other", "content": []}],
                    "source": {"kind": "tool", "callId": "c"}}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": "c", "content": [
                        {"type": "tool-result", "toolCallId": "c", "content": []}]}],
                    "source": {"kind": "tool", "callId": "c"}}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "", "role": "user",
                    "content": [], "source": {"kind": "tool", "callId": "c"}}}),
            ),
            (
                &tool,
                json!({"turn": 1, "step": 1, "message": {"id": "t", "role": "user",
                    "content": [], "source": {"kind": "plugin", "plugin": "tool"}}}),
            ),
            (
                &EventType::CompactionSummary,
                json!({"compactionId": "k", "summary": "flat", "shadowedRange":
                    {"start": 1, "end": 2}, "shadowedSeqs": [], "shadowedTokenCount": 3,
                    "provider": "p", "model": "m"}),
            ),
            (
                &EventType::RequestHeader,
                json!({"header": {"config": {"model": "m"}, "tools": [{"deferLoading": true}]},
                    "reason": "r"}),
            ),
            (
                &EventType::AgentInboxSpliced,
                json!({"target": "next-turn", "inserted": []}),
            ),
        ];
        for (kind, value) in left_to_the_tree {
            assert!(
                !same_as_tree(kind, &payload(kind, value.clone())),
                "{kind}: {value}"
            );
        }
        // A typed type whose payload stayed opaque is decoded by the tree path, not kept.
        assert!(!same_as_tree(
            &EventType::TurnStart,
            &EventData::Other(json!({"turn": 1}))
        ));
    }
}
