//! Unit tests of the transcript builder: hand-written logs in, entries out, and generated
//! sessions checked against spec 7.2 (append nodes are messages, copies never are).

use std::collections::BTreeSet;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{read_log, ReadOptions};

use super::*;

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"s","createdAt":0,"isSeeded":false,"delegationDepth":0}"#;

/// Builds a V3 log from `events` (seq and time filled in), reads it, and shows it with bodies
/// cut after 40 bytes.
fn check(events: &[Value]) -> Transcript {
    let mut text = format!("{HEADER}\n");
    for (seq, event) in events.iter().enumerate() {
        let mut event = event.clone();
        event["seq"] = json!(seq);
        event["time"] = json!(1000 + seq);
        text.push_str(&format!("{event}\n"));
    }
    let log = read_log(text.as_bytes(), ReadOptions::default()).expect("a valid test log");
    let options = ShowOptions {
        body_bytes_max: Some(40),
    };
    let mut builder = TranscriptBuilder::new("s", log.snapshot, options);
    for event in &log.events {
        builder.push(event);
    }
    builder.finish()
}

/// Every entry as `(seq, kind, one line)`: the marker's description, or a message's role and
/// block texts.
fn summarize(transcript: &Transcript) -> Vec<(u64, String, String)> {
    let line = |entry: &Entry| match &entry.body {
        EntryBody::Marker(m) => (m.name().to_owned(), m.describe()),
        EntryBody::Message(m) => {
            let blocks: Vec<String> = m.blocks.iter().map(block_line).collect();
            (m.role.clone(), blocks.join(" | "))
        }
    };
    transcript
        .entries
        .iter()
        .map(|e| {
            let (kind, text) = line(e);
            (e.seq, kind, text)
        })
        .collect()
}

fn block_line(block: &Block) -> String {
    let body = |b: &Body| format!("{} (-{})", b.text, b.cut_bytes);
    match block {
        Block::Text(b) => body(b),
        Block::Reasoning(b) => format!("reasoning: {}", body(b)),
        Block::ToolCall {
            name, arguments, ..
        } => format!("call {name}: {}", body(arguments)),
        Block::ToolResult {
            name,
            is_error,
            content,
            ..
        } => format!("result {name:?} error={is_error}: {}", body(content)),
        Block::Attachment { description, .. } => format!("[{description}]"),
        Block::Other { tag } => format!("[{tag}]"),
    }
}

fn row(seq: u64, kind: &str, text: &str) -> (u64, String, String) {
    (seq, kind.to_owned(), text.to_owned())
}

fn turn_start(turn: u64) -> Value {
    json!({ "type": "turn/start", "data": { "turn": turn } })
}

fn turn_end(turn: u64, reason: Value) -> Value {
    json!({ "type": "turn/end", "data": { "turn": turn, "reason": reason } })
}

fn step_end(turn: u64, step: u64) -> Value {
    json!({ "type": "step/end", "data": { "turn": turn, "step": step } })
}

fn tool_call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({ "type": "tool/call", "data": { "turn": 1, "step": 1, "callId": call_id,
        "name": name, "arguments": arguments } })
}

fn header() -> Value {
    json!({ "type": "request/header", "data": {
        "header": { "config": { "provider": "p", "model": "m" } }, "reason": "initial" } })
}

fn step_start(turn: u64, step: u64) -> Value {
    json!({ "type": "step/start", "data": { "turn": turn, "step": step } })
}

fn system(id: &str, text: Option<&str>, op: Value) -> Value {
    let content: Vec<Value> = text
        .map(|t| json!({ "type": "text", "text": t }))
        .into_iter()
        .collect();
    let mut event = json!({
        "type": "system/message",
        "data": { "turn": 1, "step": 1, "message": {
            "id": id, "role": "system", "content": content,
            "source": { "kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt" },
        } },
        "surfaceOp": op,
    });
    if let Some(start) = op.get("startSeq") {
        event["sourceEventSeqs"] = json!([start]);
    }
    event
}

fn replace(seq: u64) -> Value {
    json!({ "op": "replace", "startSeq": seq, "endSeq": seq })
}

fn user(id: &str, content: Value) -> Value {
    json!({
        "type": "user/message",
        "data": { "id": id, "role": "user", "content": content, "source": { "kind": "user" } },
        "surfaceOp": "append",
    })
}

fn assistant(id: &str, content: Value) -> Value {
    json!({
        "type": "assistant/message",
        "data": { "turn": 1, "step": 1, "stream": [], "message": {
            "id": id, "role": "assistant", "content": content,
            "source": { "kind": "model", "provider": "p", "model": "m" },
        } },
        "surfaceOp": "append",
    })
}

fn tool_result(id: &str, call_id: &str, text: &str, is_error: bool) -> Value {
    json!({
        "type": "tool/result",
        "data": { "turn": 1, "step": 1, "message": {
            "id": id, "role": "user",
            "content": [{ "type": "tool-result", "toolCallId": call_id,
                          "content": [{ "type": "text", "text": text }], "isError": is_error }],
            "source": { "kind": "tool", "callId": call_id },
        } },
        "surfaceOp": "append",
    })
}

// Goal: the system prompt's whole life reads as markers, never as messages: the first prompt
// once, an in-history append, a clear of that append, a head rewrite, an appended empty node.
// Method: a hand-written log through `check`; compare every entry.
#[test]
fn system_prompt_changes_are_markers() {
    let long_first_line = "x".repeat(150);
    let events = [
        turn_start(1),
        step_start(1, 1),
        system("a", Some("You are dsh.\nMore rules."), json!("append")),
        user("u", json!([{ "type": "text", "text": "hi" }])),
        system("b", Some(&long_first_line), json!("append")),
        system("c", None, replace(4)),
        system("d", Some("You are dsh, v2."), replace(2)),
        system("e", None, json!("append")),
        step_end(1, 1),
        turn_end(1, json!({ "kind": "completed" })),
    ];
    let transcript = check(&events);
    let excerpt = format!("{}...", "x".repeat(100));
    assert_eq!(
        summarize(&transcript),
        vec![
            row(0, "turn-start", "turn 1"),
            row(2, "prompt", "system prompt (24 bytes): You are dsh...."),
            row(3, "user", "hi (-0)"),
            row(
                4,
                "prompt-append",
                &format!("system prompt appended (150 bytes): {excerpt}")
            ),
            row(
                5,
                "prompt-clear",
                "system prompt cleared (#4 replaced by an empty node)"
            ),
            row(
                6,
                "prompt-rewrite",
                "system prompt rewritten (head #2 replaced) (16 bytes): You are dsh, v2."
            ),
            row(
                7,
                "prompt-clear",
                "system prompt cleared (an empty node appended)"
            ),
            row(9, "turn-end", "turn 1 ended: completed"),
        ]
    );
    let rewrite = &transcript.entries[5];
    assert_eq!((rewrite.turn, rewrite.step), (Some(1), Some(1)));
}

// Goal: messages render every block kind: text, reasoning, tool calls with their names, tool
// results named after their call, errors, attachments; long bodies are cut with the count.
// Method: one exchange through `check` with a 40-byte cut; compare every entry.
#[test]
fn messages_render_every_block() {
    let long = "0123456789".repeat(5);
    let image = json!({ "type": "image", "attachment": {
        "attachmentId": "sha256:b1ff9c8ea3a780bad09b346c423d2d0e", "mediaType": "image/png",
        "width": 1, "height": 1, "bytes": 69 } });
    let events = [
        turn_start(1),
        step_start(1, 1),
        user("u", json!([{ "type": "text", "text": "look" }, image])),
        assistant(
            "a",
            json!([
                { "type": "reasoning", "text": "think" },
                { "type": "text", "text": long },
                { "type": "tool-call", "id": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}" },
            ]),
        ),
        tool_call("c1", "bash", "{\"command\":\"ls\"}"),
        tool_result("t", "c1", "boom", true),
        assistant("b", json!([])),
    ];
    let transcript = check(&events);
    assert_eq!(
        summarize(&transcript),
        vec![
            row(0, "turn-start", "turn 1"),
            row(
                2,
                "user",
                "look (-0) | [image image/png 1x1, 69 bytes, sha256:b1ff9c8ea3a7]"
            ),
            row(
                3,
                "assistant",
                "reasoning: think (-0) | 0123456789012345678901234567890123456789 (-10) \
                 | call bash: {\"command\":\"ls\"} (-0)"
            ),
            row(5, "tool", "result Some(\"bash\") error=true: boom (-0)"),
            row(6, "assistant", ""),
        ]
    );
    let tool = &transcript.entries[3];
    assert_eq!((tool.turn, tool.step), (Some(1), Some(1)));
}

// Goal: a compaction is one marker at its start that names the shadowed span, the tokens, the
// summary's size and the checkpoint; the checkpoint copy is no message; a failed compaction
// says why.
// Method: a compaction and a failed one through `check`; compare every entry.
#[test]
fn compactions_are_one_marker() {
    let text = |t: &str| json!([{ "type": "text", "text": t }]);
    let events = [
        turn_start(1),
        step_start(1, 1),
        user("u1", text("one")),
        user("u2", text("two")),
        json!({ "type": "compaction/start", "data": { "compactionId": "c", "turn": 1 } }),
        json!({ "type": "compaction/summary", "data": {
            "compactionId": "c", "summary": [{ "type": "text", "text": "12345" }],
            "shadowedRange": { "start": 2, "end": 3 }, "shadowedSeqs": [2, 3],
            "shadowedTokenCount": 9, "provider": "p", "model": "m" } }),
        json!({ "type": "user/message",
            "data": { "id": "k", "role": "user", "content": [{ "type": "text", "text": "ck" }],
                      "source": { "kind": "plugin", "plugin": "compact", "compactionId": "c" } },
            "surfaceOp": { "op": "replace", "startSeq": 2, "endSeq": 3 },
            "sourceEventSeqs": [4, 5, 2, 3] }),
        json!({ "type": "compaction/end", "data": { "compactionId": "c", "turn": 1 } }),
        json!({ "type": "compaction/start", "data": { "compactionId": "d", "turn": 1 } }),
        json!({ "type": "compaction/end", "data": { "compactionId": "d", "turn": 1,
            "error": [{ "code": "TOO_BIG", "message": "summary is not smaller\nat all" }] } }),
    ];
    assert_eq!(
        summarize(&check(&events)),
        vec![
            row(0, "turn-start", "turn 1"),
            row(2, "user", "one (-0)"),
            row(3, "user", "two (-0)"),
            row(
                4,
                "compaction",
                "compaction c: 2 nodes #2..#3 (~9 tokens) replaced by a 5-byte summary, \
                 checkpoint #6"
            ),
            row(
                8,
                "compaction",
                "compaction d failed: TOO_BIG: summary is not smaller..."
            ),
        ]
    );
}

// Goal: a prune is one marker naming its model copy, and a replace nobody announced is a
// marker too; neither copy is a message. Turn ends say why; attempts and retries say why.
// Method: a hand-written log through `check`; compare every entry.
#[test]
fn prunes_replaces_attempts_and_turn_ends() {
    let mut pruned = tool_result("t", "c1", "[output pruned]", false);
    pruned["surfaceOp"] = replace(5);
    pruned["sourceEventSeqs"] = json!([5]);
    let mut again = tool_result("t", "c1", "[gone]", false);
    again["surfaceOp"] = replace(7);
    again["sourceEventSeqs"] = json!([7]);
    let events = [
        turn_start(1),
        step_start(1, 1),
        header(),
        assistant(
            "a",
            json!([{ "type": "tool-call", "id": "c1", "name": "grep", "arguments": "{}" }]),
        ),
        tool_call("c1", "grep", "{}"),
        tool_result("t", "c1", "hits", false),
        json!({ "type": "compaction/prune", "data": { "shadowedRange": { "start": 5, "end": 5 },
            "shadowedSeqs": [5], "shadowedTokenCount": 7 } }),
        pruned,
        again,
        json!({ "type": "assistant/attempt", "data": { "turn": 1, "step": 1, "stream": [
            { "type": "chunk", "time": 5, "chunk": { "type": "finish", "reason": {
                "kind": "error", "failure": { "code": "EMPTY_RESPONSE", "message": "nothing" } } } }
        ] } }),
        json!({ "type": "llm/retry", "data": { "retryId": "r", "turn": 1, "step": 1,
            "provider": "p", "mode": "normal", "policyKey": "k", "retry": 1, "maxRetries": 2,
            "delayMs": 10, "failure": { "code": "EMPTY_RESPONSE", "message": "nothing" } } }),
        step_end(1, 1),
        turn_end(
            1,
            json!({ "kind": "aborted", "reason": { "kind": "hook", "reason": "stop" } }),
        ),
        turn_start(2),
        turn_end(
            2,
            json!({ "kind": "error", "error": { "message": "rate limited" } }),
        ),
    ];
    assert_eq!(
        summarize(&check(&events)),
        vec![
            row(0, "turn-start", "turn 1"),
            row(3, "assistant", "call grep: {} (-0)"),
            row(5, "tool", "result Some(\"grep\") error=false: hits (-0)"),
            row(
                6,
                "prune",
                "tool result #5 pruned (~7 tokens), model copy #7"
            ),
            row(
                8,
                "replace",
                "tool/result replaced #7..#7 (model-only copy)"
            ),
            row(
                9,
                "attempt",
                "model call settled without a message: error: EMPTY_RESPONSE: nothing"
            ),
            row(
                10,
                "retry",
                "retry 1 of 2 in 10 ms after EMPTY_RESPONSE: nothing"
            ),
            row(12, "turn-end", "turn 1 ended: aborted (hook: stop)"),
            row(13, "turn-start", "turn 2"),
            row(14, "turn-end", "turn 2 ended: error: rate limited"),
        ]
    );
}

// Goal: cutting never splits a character and counts the bytes it removed; excerpts keep the
// first non-blank line and mark what they dropped.
// Method: direct calls on multi-byte text (escapes keep this file ASCII).
#[test]
fn cut_and_excerpt() {
    let text = "ab\u{e9}\u{e9}";
    assert_eq!(text.len(), 6);
    let cut_at = |max| {
        let body = cut(text, Some(max));
        (body.text, body.cut_bytes)
    };
    assert_eq!(cut_at(3), ("ab".to_owned(), 4));
    assert_eq!(cut_at(4), ("ab\u{e9}".to_owned(), 2));
    assert_eq!(cut_at(6), (text.to_owned(), 0));
    assert_eq!(cut(text, None).cut_bytes, 0);
    assert_eq!(cut("", Some(0)).text, "");
    assert_eq!(excerpt("\n\n  first  \n"), "first");
    assert_eq!(excerpt("first\nsecond"), "first...");
    assert_eq!(excerpt(""), "");
}

// Goal: on generated sessions (head rewrites, in-history appends, clears, compactions,
// prunes, retries), the messages are exactly the appended user, assistant and tool nodes,
// and every replacement copy is folded into a marker: a prompt marker, a compaction's
// checkpoint, a prune's copy, or a replace marker.
// Method: generate with several seeds, show, and compare seq sets with the events.
#[test]
fn generated_sessions_show_append_nodes_only() {
    for (events, seed) in [(300, 39), (500, 31), (3000, 1), (3000, 2)] {
        let mut generator = Generator::new(GenOptions { events, seed });
        let header = generator.header();
        let mut builder = TranscriptBuilder::new(&header.id, false, ShowOptions::default());
        let mut appended = BTreeSet::new();
        let mut copies = BTreeSet::new();
        while let Some(batch) = generator.next_batch() {
            for event in &batch {
                let message_type = matches!(
                    event.kind,
                    EventType::UserMessage | EventType::AssistantMessage | EventType::ToolResult
                );
                match event.surface_op {
                    Some(SurfaceOp::Append) if message_type => {
                        appended.insert(event.seq);
                    }
                    Some(SurfaceOp::Replace { .. }) => {
                        copies.insert(event.seq);
                    }
                    _ => {}
                }
                builder.push(event);
            }
        }
        let transcript = builder.finish();
        let messages: BTreeSet<u64> = transcript
            .entries
            .iter()
            .filter(|e| matches!(e.body, EntryBody::Message(_)))
            .map(|e| e.seq)
            .collect();
        assert_eq!(messages, appended, "seed {seed}");
        let mut marked = BTreeSet::new();
        for entry in &transcript.entries {
            let EntryBody::Marker(marker) = &entry.body else {
                continue;
            };
            match marker {
                Marker::Compaction(c) => {
                    assert!(c.end_seq.is_some(), "seed {seed}: {c:?}");
                    marked.extend(c.checkpoint_seq);
                }
                Marker::Prune { rewrite_seq, .. } => {
                    assert!(rewrite_seq.is_some(), "seed {seed}: {marker:?}");
                    marked.extend(*rewrite_seq);
                }
                Marker::PromptRewrite { .. }
                | Marker::PromptClear {
                    replaced_seq: Some(_),
                }
                | Marker::Replace { .. } => {
                    marked.insert(entry.seq);
                }
                _ => {}
            }
        }
        assert_eq!(marked, copies, "seed {seed}");
        let kinds: BTreeSet<&str> = transcript
            .entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::Marker(m) => Some(m.name()),
                EntryBody::Message(_) => None,
            })
            .collect();
        for kind in ["turn-start", "turn-end", "prompt"] {
            assert!(kinds.contains(kind), "seed {seed}: no {kind} in {kinds:?}");
        }
    }
}
