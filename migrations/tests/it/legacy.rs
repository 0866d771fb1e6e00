//! Legacy V0 shapes read from JSONL and migrated through the whole chain.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_format::{read_log, ContentBlock, EventData, ReadOptions, SessionFold};
use sessionlog_migrations::{Catalog, Migrator, MigratorOptions};

fn text(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}

// Goal: a V0 log written before the current message wrappers (a flat user message, a flat
// steering note carrying surfaceOp, a flat assistant message citing its chunks, a flat tool
// result, `compact/*` names without ids, a turn/start trigger, a retired turn/end reason, a
// messagePrefix) is read by the V0 reader and crosses V0 -> V1 -> V2 -> V3 with its request
// proved; the V3 messages carry the legacy ids and the prompt comes first.
// Method: write the rows as JSONL, read them with `read_log`, push them through a Migrator,
// fold the output and compare roles, texts and ids.
#[test]
fn legacy_v0_shapes_cross_the_chain() {
    let header = json!({"type": "session", "version": 0, "id": "old", "createdAt": 1,
        "delegationDepth": 0});
    let chunk = |seq: u64, chunk: Value| {
        json!({"type": "assistant/chunk", "seq": seq, "time": 10 + seq,
            "data": {"turn": 1, "step": 1, "chunk": chunk}})
    };
    let rows = vec![
        json!({"type": "turn/start", "seq": 0, "time": 1,
            "data": {"turn": 1, "trigger": {"kind": "message"}}}),
        json!({"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}}),
        json!({"type": "user/message", "seq": 2, "time": 3, "surfaceOp": "append",
            "data": {"content": [{"type": "text", "text": "read the file"}],
                "source": {"kind": "user"}}}),
        json!({"type": "steering/message", "seq": 3, "time": 4, "surfaceOp": "append",
            "data": {"turn": 1, "content": [{"type": "text", "text": "quickly"}],
                "source": {"kind": "user"}}}),
        json!({"type": "request/header", "seq": 4, "time": 5, "data": {"header": {
            "config": {"provider": "mock", "model": "m"}, "system": "be brief",
            "messagePrefix": []}, "reason": "initial"}}),
        chunk(
            5,
            json!({"type": "block-start", "index": 0, "blockType": "tool-call"}),
        ),
        chunk(
            6,
            json!({"type": "tool-call-delta", "index": 0, "id": "call-1", "name": "read",
            "argumentsDelta": "{}"}),
        ),
        chunk(
            7,
            json!({"type": "block-end", "index": 0, "block": {"type": "tool-call",
            "id": "call-1", "name": "read", "arguments": "{}"}}),
        ),
        chunk(
            8,
            json!({"type": "finish", "reason": {"kind": "tool-calls"}}),
        ),
        json!({"type": "assistant/message", "seq": 9, "time": 20, "surfaceOp": "append",
            "sourceEventSeqs": [5, 6, 7, 8], "data": {"turn": 1, "step": 1,
            "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
            "provenance": {"provider": "mock", "model": "m"}}}),
        json!({"type": "tool/call", "seq": 10, "time": 21,
            "data": {"turn": 1, "step": 1, "callId": "call-1", "name": "read", "arguments": "{}"}}),
        json!({"type": "tool/result", "seq": 11, "time": 22, "surfaceOp": "append",
            "sourceEventSeqs": [10], "data": {"turn": 1, "step": 1, "callId": "call-1",
                "content": [{"type": "text", "text": "contents"}], "isError": false}}),
        json!({"type": "step/end", "seq": 12, "time": 23, "data": {"turn": 1, "step": 1}}),
        json!({"type": "turn/end", "seq": 13, "time": 24,
            "data": {"turn": 1, "reason": {"kind": "aborted"}}}),
    ];
    let mut jsonl = text(&header);
    for row in &rows {
        jsonl.push('\n');
        jsonl.push_str(&text(row));
    }
    jsonl.push('\n');
    let log = read_log(jsonl.as_bytes(), ReadOptions::default()).expect("the V0 reader reads it");
    let (mut migrator, target) =
        Migrator::new(&Catalog::released(), log.header, MigratorOptions::default()).unwrap();
    assert_eq!(target.version, Some(3));
    let mut out = Vec::new();
    for event in log.events {
        let seq = event.seq;
        if let Err(refusal) = migrator.push(event, &mut out) {
            panic!("seq {seq}: {refusal}");
        }
    }
    let summary = migrator.finish(&mut out).unwrap();
    assert_eq!(summary.requests_proved, Some(1));

    let mut fold = SessionFold::new(sessionlog_format::rules::RuleContext {
        version: sessionlog_format::FormatVersion::V3,
        snapshot: false,
    });
    for event in &out {
        fold.admit(std::sync::Arc::new(event.clone())).unwrap();
    }
    let derived: Vec<(String, String, String)> = fold
        .messages()
        .iter()
        .map(|m| {
            let text = match &m.content[0] {
                ContentBlock::Text(t) => t.text.clone(),
                ContentBlock::ToolCall(c) => c.name.clone(),
                ContentBlock::ToolResult(r) => format!("{:?}", r.content),
                other => format!("{other:?}"),
            };
            (
                m.role.clone().unwrap(),
                m.id.clone().unwrap_or_default(),
                text,
            )
        })
        .collect();
    let ids: Vec<&str> = derived.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(
        derived.iter().map(|(r, ..)| r.as_str()).collect::<Vec<_>>(),
        ["system", "user", "user", "assistant", "user"]
    );
    assert_eq!(derived[0].2, "be brief");
    assert_eq!(
        &ids[1..],
        [
            "legacy-message:old:2",
            "legacy-message:old:3",
            "legacy-message:old:9",
            "legacy-message:old:11"
        ]
    );
    let turn_end = out.iter().find_map(|e| match &e.data {
        EventData::TurnEnd(d) => Some(d.reason.clone()),
        _ => None,
    });
    assert_eq!(
        turn_end,
        Some(json!({"kind": "aborted", "reason": {"kind": "legacy"}}))
    );
    let stream = out.iter().find_map(|e| match &e.data {
        EventData::AssistantMessage(d) => d.stream.clone(),
        _ => None,
    });
    assert_eq!(
        stream.map(|s| s.len()),
        Some(4),
        "the four chunks are embedded"
    );
}
