//! Event builders and store helpers shared by the engine tests.

use std::path::PathBuf;

use serde_json::json;
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::message::ToolResultBlock;
use sessionlog_format::payload::{StepRef, SystemMessageData, ToolResultData, TurnStart};
use sessionlog_format::{
    ContentBlock, Event, EventData, Message, SessionHeader, Source, SurfaceOp,
};
use sessionlog_store::embedded::Store;

/// A fresh store in a temporary directory (kept alive by the returned guard).
pub fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(&dir.path().join("store.redb")).expect("a new store opens");
    (dir, store)
}

pub fn store_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("store.redb")
}

pub fn header(id: &str) -> SessionHeader {
    SessionHeader::new_v3(id, 1_700_000_000_000)
}

pub fn source(kind: &str) -> Source {
    Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: Default::default(),
    }
}

pub fn message(id: &str, role: &str, source: Source, text: &str) -> Message {
    Message {
        id: Some(id.to_owned()),
        role: Some(role.to_owned()),
        content: if text.is_empty() {
            vec![]
        } else {
            vec![ContentBlock::text(text)]
        },
        source: Some(source),
        extra: Default::default(),
    }
}

pub fn turn_start(seq: u64, turn: u64) -> Event {
    Event::new(
        seq,
        0,
        EventData::TurnStart(Box::new(TurnStart {
            turn,
            extra: Default::default(),
        })),
    )
}

pub fn step_start(seq: u64, turn: u64, step: u64) -> Event {
    let data = StepRef {
        turn,
        step,
        extra: Default::default(),
    };
    Event::new(seq, 0, EventData::StepStart(Box::new(data)))
}

pub fn step_end(seq: u64, turn: u64, step: u64) -> Event {
    let data = StepRef {
        turn,
        step,
        extra: Default::default(),
    };
    Event::new(seq, 0, EventData::StepEnd(Box::new(data)))
}

pub fn system(seq: u64, turn: u64, step: u64, text: &str, op: SurfaceOp) -> Event {
    let mut plugin = source("plugin");
    plugin.plugin = Some("@deepseek-ai/dsh-system-prompt".to_owned());
    let message = message(&format!("sys-{seq}"), "system", plugin, text);
    let data = SystemMessageData {
        turn,
        step,
        message,
        extra: Default::default(),
    };
    let event = Event::new(seq, 0, EventData::SystemMessage(Box::new(data))).with_surface_op(op);
    match op {
        SurfaceOp::Append => event,
        SurfaceOp::Replace { start_seq, end_seq } => {
            let mut seqs = vec![start_seq];
            if end_seq != start_seq {
                seqs.push(end_seq);
            }
            event.with_sources(seqs)
        }
    }
}

pub fn user(seq: u64, text: &str, op: SurfaceOp, sources: Option<Vec<u64>>) -> Event {
    let message = message(&format!("user-{seq}"), "user", source("user"), text);
    let event = Event::new(seq, 0, EventData::UserMessage(Box::new(message))).with_surface_op(op);
    match sources {
        Some(seqs) => event.with_sources(seqs),
        None => event,
    }
}

pub fn tool_result(seq: u64, call_id: &str, text: &str, op: SurfaceOp, sources: Vec<u64>) -> Event {
    let mut tool = source("tool");
    tool.call_id = Some(call_id.to_owned());
    let block = ToolResultBlock {
        tool_call_id: call_id.to_owned(),
        content: vec![ContentBlock::text(text)],
        is_error: Some(false),
        extra: Default::default(),
    };
    let message = Message {
        id: Some(format!("result-{call_id}")),
        role: Some("user".to_owned()),
        content: vec![ContentBlock::ToolResult(block)],
        source: Some(tool),
        extra: Default::default(),
    };
    let data = ToolResultData {
        turn: 1,
        step: 1,
        message,
        error: None,
        meta: None,
        extra: Default::default(),
    };
    Event::new(seq, 0, EventData::ToolResult(Box::new(data)))
        .with_surface_op(op)
        .with_sources(sources)
}

/// An assistant message at `seq` advertising the call `call_id`, and its `tool/call` at
/// `seq + 1`: what a tool result must follow (spec 12.2, tool lifecycle).
pub fn advertised(seq: u64, call_id: &str) -> Vec<Event> {
    use sessionlog_format::message::ToolCallBlock;
    use sessionlog_format::payload::{AssistantMessageData, ToolCallData};
    let mut model = source("model");
    model.provider = Some("p".to_owned());
    model.model = Some("m".to_owned());
    let call = ToolCallBlock {
        id: call_id.to_owned(),
        name: "read".to_owned(),
        arguments: "{}".to_owned(),
        extra: Default::default(),
    };
    let message = Message {
        id: Some(format!("assistant-{seq}")),
        role: Some("assistant".to_owned()),
        content: vec![ContentBlock::ToolCall(call)],
        source: Some(model),
        extra: Default::default(),
    };
    let assistant = AssistantMessageData {
        turn: 1,
        step: 1,
        message,
        stream: Some(Vec::new()),
        usage: None,
        interrupted: None,
        extra: Default::default(),
    };
    let started = ToolCallData {
        turn: 1,
        step: 1,
        call_id: call_id.to_owned(),
        name: "read".to_owned(),
        arguments: "{}".to_owned(),
        extra: Default::default(),
    };
    vec![
        Event::new(seq, 0, EventData::AssistantMessage(Box::new(assistant)))
            .with_surface_op(SurfaceOp::Append),
        Event::new(seq + 1, 0, EventData::ToolCall(Box::new(started))),
    ]
}

pub fn title(seq: u64) -> Event {
    Event::other(
        seq,
        0,
        sessionlog_format::EventType::SessionTitle,
        json!({"title": "t", "messageSeqs": [], "source": {"kind": "user"}}),
    )
}

/// All batches of a generated session.
pub fn generated(events: u64, seed: u64) -> (SessionHeader, Vec<Vec<Event>>) {
    let mut generator = Generator::new(GenOptions { events, seed });
    let header = generator.header();
    let mut batches = Vec::new();
    while let Some(batch) = generator.next_batch() {
        batches.push(batch);
    }
    (header, batches)
}
