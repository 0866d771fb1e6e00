//! Stateless admission rules: what one event must satisfy on its own (spec 4, 9, 11 codec).
//!
//! The stateful rules (the surface transition and the protected head) live in
//! [`crate::admission`]. Both run wherever data enters: the reader, the migrator's output
//! check, and the engine's append.

use serde_json::Value;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::header::is_placeholder;
use crate::json::{check_serialize_lossless, SAFE_INTEGER_MAX};
use crate::members::check_members;
use crate::message::{ContentBlock, Message};
use crate::payload::{RequestHeaderData, ToolResultData};
use crate::row::DataRef;
use crate::version::FormatVersion;

/// What the rules depend on besides the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleContext {
    pub version: FormatVersion,
    /// Normalized recordings hold `{{name}}` placeholders where values are expected.
    pub snapshot: bool,
}

type Checked = Result<(), Violation>;

fn fail(rule: Rule, message: impl Into<String>) -> Checked {
    Err(Violation::new(rule, message))
}

/// Checks every stateless rule of `ctx.version` on `event`.
pub fn check_event(event: &Event, ctx: RuleContext) -> Checked {
    check_envelope_values(event)?;
    check_vocabulary(event, ctx)?;
    if is_opaque_unknown(event, ctx) {
        return Ok(());
    }
    check_surface_metadata(event, ctx)?;
    if ctx.version == FormatVersion::V4 {
        crate::v4_rows::check_row(event)?;
    }
    check_payload(event, ctx)?;
    check_members(event, ctx)?;
    if ctx.version >= FormatVersion::V2 {
        if let Some(message) = event.message() {
            check_message_shape(&event.kind, message, ctx)?;
        }
    }
    Ok(())
}

/// Whether `kind` is part of the vocabulary `version` can read.
pub fn is_known(kind: &EventType, version: FormatVersion) -> bool {
    use EventType as T;
    match kind {
        T::Other(_) => false,
        T::SystemMessage | T::ToolPtcDispatch | T::ToolPtcDispatchStart => {
            version.has_system_head()
        }
        T::DeveloperMessage => version == FormatVersion::V4,
        T::ToolCodeDispatch | T::ToolCodeDispatchStart => true,
        T::AssistantChunk => version.has_packed_rows(),
        T::SteeringMessage
        | T::CompactStart
        | T::CompactSummary
        | T::CompactEnd
        | T::CompactPrune
        | T::RequestHeaderDelta
        | T::ModeSet => version == FormatVersion::V0,
        _ => true,
    }
}

/// An unknown type with `ignorable: true` is kept opaquely, metadata included, and skipped.
pub fn is_opaque_unknown(event: &Event, ctx: RuleContext) -> bool {
    event.ignorable && !is_known(&event.kind, ctx.version)
}

/// Spec  4 rule 1 and 12.1 rule 2: values a reader would refuse are never admitted.
fn check_envelope_values(event: &Event) -> Checked {
    if event.seq > SAFE_INTEGER_MAX {
        return fail(
            Rule::Envelope,
            format!("seq {} is not a safe integer", event.seq),
        );
    }
    if event.time.unsigned_abs() > SAFE_INTEGER_MAX {
        return fail(
            Rule::Envelope,
            format!("time {} is not a safe integer", event.time),
        );
    }
    if let Some(seqs) = &event.source_event_seqs {
        if let Some(late) = seqs.iter().find(|&&s| s >= event.seq) {
            return fail(
                Rule::SourceSeqs,
                format!("source seq {late} is not earlier than seq {}", event.seq),
            );
        }
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return fail(
                Rule::SourceSeqs,
                format!("source seq {} is listed twice", pair[0]),
            );
        }
    }
    check_serialize_lossless(&DataRef(&event.data))
        .map_err(|m| Violation::new(Rule::Json, format!("data: {m}")))
}

fn check_vocabulary(event: &Event, ctx: RuleContext) -> Checked {
    if is_known(&event.kind, ctx.version) || event.ignorable {
        return Ok(());
    }
    if ctx.version == FormatVersion::V4 {
        return fail(
            Rule::UnknownEvent,
            format!(
                "format v4 contains unknown event type {:?} at seq {}",
                event.kind.as_str(),
                event.seq
            ),
        );
    }
    fail(
        Rule::UnknownEvent,
        format!(
            "unknown event type {} in format {} (not marked ignorable)",
            event.kind, ctx.version
        ),
    )
}

fn is_surface_type(kind: &EventType, version: FormatVersion) -> bool {
    match version {
        FormatVersion::V4 => kind.is_surface_v4(),
        FormatVersion::V3 => kind.is_surface_v3(),
        // A V0 steering note was a surface message; V0 -> V1 renames it `user/message`.
        FormatVersion::V0 => kind.is_surface_pre_v3() || *kind == EventType::SteeringMessage,
        _ => kind.is_surface_pre_v3(),
    }
}

fn check_surface_metadata(event: &Event, ctx: RuleContext) -> Checked {
    let kind = &event.kind;
    if !is_surface_type(kind, ctx.version) {
        if event.surface_op.is_some() {
            return fail(
                Rule::SurfaceOp,
                format!("{kind} is not surface-eligible and must not carry a surfaceOp marker"),
            );
        }
        if event.source_event_seqs.is_some() {
            return fail(
                Rule::SourceSeqs,
                format!("{kind} is not surface-eligible and must not carry sourceEventSeqs"),
            );
        }
        return Ok(());
    }
    // V4 lets a `developer/message` be ignorable, for readers that do not know the type; it
    // is checked in full all the same (dsh-v4.md 4.7).
    let ignorable_developer =
        ctx.version == FormatVersion::V4 && *kind == EventType::DeveloperMessage;
    if event.ignorable && !ignorable_developer {
        return fail(
            Rule::Envelope,
            format!("{kind} is a surface event and cannot be ignorable"),
        );
    }
    let Some(op) = event.surface_op else {
        return fail(
            Rule::SurfaceOp,
            format!("{kind} is surface-eligible and requires a surfaceOp marker"),
        );
    };
    if let SurfaceOp::Replace { start_seq, end_seq } = op {
        for endpoint in [start_seq, end_seq] {
            if endpoint >= event.seq {
                return fail(
                    Rule::SurfaceOp,
                    format!(
                        "replace endpoint {endpoint} is not earlier than seq {}",
                        event.seq
                    ),
                );
            }
        }
    }
    check_source_seqs(event, ctx)
}

fn check_source_seqs(event: &Event, ctx: RuleContext) -> Checked {
    let Some(seqs) = &event.source_event_seqs else {
        return Ok(());
    };
    let assistant = event.kind == EventType::AssistantMessage;
    if assistant && !ctx.version.has_packed_rows() {
        return fail(
            Rule::SourceSeqs,
            "assistant/message must not carry sourceEventSeqs; it embeds its source stream",
        );
    }
    if seqs.is_empty() && !assistant {
        return fail(
            Rule::SourceSeqs,
            "sourceEventSeqs must not be empty when present",
        );
    }
    Ok(())
}

fn check_payload(event: &Event, ctx: RuleContext) -> Checked {
    let v3 = ctx.version.has_system_head();
    match &event.data {
        EventData::RequestHeader(data) if ctx.version >= FormatVersion::V2 => {
            check_request_header(data, ctx)
        }
        EventData::ToolResult(data) if ctx.version == FormatVersion::V3 => {
            check_tool_result_error(data)
        }
        EventData::AssistantMessage(data) if ctx.version >= FormatVersion::V2 => {
            if data.stream.is_none() {
                return fail(Rule::Payload, "assistant/message requires a stream array");
            }
            Ok(())
        }
        // V4 checks its system messages natively and allows extra keys (`crate::v4_rows`).
        EventData::SystemMessage(_) if ctx.version == FormatVersion::V4 => Ok(()),
        EventData::SystemMessage(data) => {
            if !data.extra.is_empty() || !data.message.extra.is_empty() {
                return fail(
                    Rule::RowAdmission,
                    "system/message data must have exactly turn, step and message, and its \
                     message exactly id, role, source and content",
                );
            }
            if data.turn == 0 || data.step == 0 {
                return fail(
                    Rule::RowAdmission,
                    "system/message turn and step must be positive",
                );
            }
            Ok(())
        }
        _ if ctx.version == FormatVersion::V4 && !event.ignorable => match event.kind {
            EventType::ToolCodeDispatch | EventType::ToolCodeDispatchStart => fail(
                Rule::RowAdmission,
                format!("format v4 rejects retired event type {}", event.kind),
            ),
            _ => Ok(()),
        },
        _ if v3 && !event.ignorable => match event.kind {
            EventType::ToolCodeDispatch | EventType::ToolCodeDispatchStart => fail(
                Rule::RowAdmission,
                format!(
                    "format v3 refuses the retired predecessor tag {}; it is written \
                     tool/ptc-dispatch* since v3",
                    event.kind
                ),
            ),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

const HEADER_REASONS: [&str; 4] = ["initial", "resume", "change", "series"];

fn check_request_header(data: &RequestHeaderData, ctx: RuleContext) -> Checked {
    let header = &data.header;
    let v3 = ctx.version.has_system_head();
    if ctx.version == FormatVersion::V3 && header.system.is_some() {
        return fail(
            Rule::RowAdmission,
            "format v3 request/header rejects retired header.system",
        );
    }
    let config = &header.config;
    match &config.provider {
        Some(p) if !p.is_empty() => {}
        _ => {
            return fail(
                Rule::Payload,
                "request/header config.provider must be a non-empty string",
            )
        }
    }
    if config.model.is_empty() {
        return fail(
            Rule::Payload,
            "request/header config.model must be a non-empty string",
        );
    }
    if config.reasoning_effort.as_deref() == Some("") {
        return fail(
            Rule::Payload,
            "request/header config.reasoningEffort must not be empty",
        );
    }
    if let Some(tools) = &header.tools {
        match tools {
            Value::Array(items) if items.is_empty() && v3 => {
                return fail(
                    Rule::Payload,
                    "request/header tools must not be an empty array",
                );
            }
            Value::Array(_) => {}
            Value::String(s) if ctx.snapshot && is_placeholder(s) => {}
            _ => return fail(Rule::Payload, "request/header tools must be an array"),
        }
    }
    if let Some(defaults) = &header.adapter_defaults {
        check_adapter_defaults(defaults, data, v3)?;
    }
    if !HEADER_REASONS.contains(&data.reason.as_str()) {
        return fail(
            Rule::Payload,
            format!(
                "request/header reason must be one of initial, resume, change, series; found \
                 \"{}\"",
                data.reason
            ),
        );
    }
    if data.starts_series == Some(false) {
        return fail(
            Rule::Payload,
            "request/header startsSeries must be absent or true",
        );
    }
    Ok(())
}

fn check_adapter_defaults(defaults: &Value, data: &RequestHeaderData, v3: bool) -> Checked {
    let Value::Object(flags) = defaults else {
        return fail(
            Rule::Payload,
            "request/header adapterDefaults must be an object",
        );
    };
    if flags.is_empty() && v3 {
        return fail(
            Rule::Payload,
            "request/header adapterDefaults must not be empty",
        );
    }
    let config = &data.header.config;
    for (key, value) in flags {
        let present = match key.as_str() {
            "reasoningEffort" => config.reasoning_effort.is_some(),
            "maxTokens" => config.max_tokens.is_some(),
            _ => {
                return fail(
                    Rule::Payload,
                    format!("request/header adapterDefaults has unexpected flag `{key}`"),
                )
            }
        };
        if value != &Value::Bool(true) {
            return fail(
                Rule::Payload,
                format!("request/header adapterDefaults.{key} must be true"),
            );
        }
        if !present {
            return fail(
                Rule::Payload,
                format!("request/header adapterDefaults.{key} flags a field missing from config"),
            );
        }
    }
    Ok(())
}

fn check_tool_result_error(data: &ToolResultData) -> Checked {
    if data.error.is_none() {
        return Ok(());
    }
    let flagged = match data.message.content.first() {
        Some(ContentBlock::ToolResult(block)) => block.is_error == Some(true),
        _ => false,
    };
    if !flagged {
        return fail(
            Rule::Payload,
            "tool/result with data.error requires message.content[0].isError to be true",
        );
    }
    Ok(())
}

fn check_message_shape(kind: &EventType, message: &Message, ctx: RuleContext) -> Checked {
    let shape = |text: String| fail(Rule::MessageShape, format!("{kind} message {text}"));
    match &message.id {
        Some(id) if !id.is_empty() => {}
        _ => return shape("requires a non-empty string id".to_owned()),
    }
    let Some(source) = &message.source else {
        return shape("requires a source object".to_owned());
    };
    if source.kind.is_empty() {
        return shape("requires a non-empty source.kind".to_owned());
    }
    let role = message.role.as_deref().unwrap_or("");
    let non_empty = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    match kind {
        // V4 system messages and tool results are checked natively (`crate::v4_rows`).
        EventType::SystemMessage | EventType::ToolResult if ctx.version == FormatVersion::V4 => {}
        EventType::SystemMessage => {
            if role != "system" {
                return shape(format!("must have role system, found \"{role}\""));
            }
            if source.kind != "plugin" || !non_empty(&source.plugin) {
                return shape("must have a plugin source with a non-empty plugin".to_owned());
            }
        }
        EventType::UserMessage if role != "user" => {
            return shape(format!("must have role user, found \"{role}\""));
        }
        EventType::AssistantMessage => {
            if role != "assistant" {
                return shape(format!("must have role assistant, found \"{role}\""));
            }
            if source.kind != "model" || !non_empty(&source.provider) || !non_empty(&source.model) {
                return shape(
                    "must have a model source with non-empty provider and model".to_owned(),
                );
            }
        }
        EventType::ToolResult => check_tool_result_shape(message, role, ctx)?,
        _ => {}
    }
    Ok(())
}

fn check_tool_result_shape(message: &Message, role: &str, ctx: RuleContext) -> Checked {
    let shape = |text: &str| fail(Rule::MessageShape, format!("tool/result message {text}"));
    let expected_role = if ctx.version >= FormatVersion::V2 {
        "user"
    } else {
        role
    };
    if role != expected_role {
        return shape(&format!("must have role user, found \"{role}\""));
    }
    let source = message
        .source
        .as_ref()
        .expect("checked by the caller: source is present");
    let call_id = match (&*source.kind, &source.call_id) {
        ("tool", Some(id)) if !id.is_empty() => id,
        _ => return shape("must have a tool source with a non-empty callId"),
    };
    match message.content.as_slice() {
        [ContentBlock::ToolResult(block)] => {
            if &block.tool_call_id != call_id {
                return shape("tool-result toolCallId must equal source.callId");
            }
            Ok(())
        }
        _ => shape("must hold exactly one tool-result content block"),
    }
}
