//! The pure event builders of the loop and of the repair of an interrupted turn: the same
//! tool result, step end and turn end whoever writes them.

use serde_json::{json, Value};
use sessionlog_format::message::ToolResultBlock;
use sessionlog_format::payload::{StepRef, ToolResultData, TurnEnd};
use sessionlog_format::{ContentBlock, Event, EventData, Extra, Message, Source, SurfaceOp};

/// A tool's answer to one call, as the loop or the repair records it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer<'a> {
    pub call_id: &'a str,
    pub text: &'a str,
    pub is_error: bool,
    /// The `error` member of `tool/result` (the repair's outcome), if any.
    pub error: Option<Value>,
}

/// The source of a tool result: the call it answers.
pub fn tool_source(call_id: &str) -> Source {
    Source {
        kind: "tool".into(),
        plugin: None,
        provider: None,
        model: None,
        call_id: Some(call_id.to_owned()),
        extra: Extra::new(),
    }
}

/// The `tool/result` at `seq` of step `(turn, step)` answering `answer.call_id` with the
/// message id `id`; `sources` names the call's seq when it is known.
pub fn tool_result(
    (seq, time): (u64, i64),
    (turn, step): (u64, u64),
    id: String,
    answer: ToolAnswer<'_>,
    sources: Option<Vec<u64>>,
) -> Event {
    let message = Message {
        id: Some(id),
        role: Some("user".into()),
        content: vec![ContentBlock::ToolResult(ToolResultBlock {
            tool_call_id: answer.call_id.to_owned(),
            content: vec![ContentBlock::text(answer.text)],
            is_error: Some(answer.is_error),
            extra: Extra::new(),
        })],
        source: Some(tool_source(answer.call_id)),
        extra: Extra::new(),
    };
    let data = ToolResultData {
        turn,
        step,
        message,
        error: answer.error,
        meta: None,
        extra: Extra::new(),
    };
    let event = Event::new(seq, time, EventData::ToolResult(Box::new(data)))
        .with_surface_op(SurfaceOp::Append);
    match sources {
        Some(sources) => event.with_sources(sources),
        None => event,
    }
}

/// A step's `{turn, step}` reference.
pub fn step_ref(turn: u64, step: u64) -> StepRef {
    StepRef {
        turn,
        step,
        extra: Extra::new(),
    }
}

/// The `step/end` of step `(turn, step)` at `seq`.
pub fn step_end(seq: u64, time: i64, (turn, step): (u64, u64)) -> Event {
    Event::new(
        seq,
        time,
        EventData::StepEnd(Box::new(step_ref(turn, step))),
    )
}

/// The `turn/end` of `turn` at `seq`, with reason `kind` (`completed`, `aborted`,
/// `interrupted`).
pub fn turn_end(seq: u64, time: i64, turn: u64, kind: &str) -> Event {
    let data = TurnEnd {
        turn,
        reason: json!({ "kind": kind }),
        extra: Extra::new(),
    };
    Event::new(seq, time, EventData::TurnEnd(Box::new(data)))
}
