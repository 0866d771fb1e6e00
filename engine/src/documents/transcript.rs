//! The `show --json` document: a transcript's entries, messages with their blocks and markers
//! with the fields of their kind.

use serde_json::{json, Value};

use crate::show::{Block, Body, Entry, EntryBody, Marker, Transcript};

/// `{"session","entries":[...]}`.
pub fn transcript(transcript: &Transcript) -> Value {
    let entries: Vec<Value> = transcript.entries.iter().map(entry).collect();
    json!({ "session": transcript.session, "entries": entries })
}

pub fn entry(entry: &Entry) -> Value {
    let (kind, fields) = match &entry.body {
        EntryBody::Message(message) => {
            let blocks: Vec<Value> = message.blocks.iter().map(block_json).collect();
            let fields = json!({
                "role": message.role,
                "source": message.source,
                "interrupted": message.interrupted,
                "blocks": blocks,
            });
            ("message", fields)
        }
        EntryBody::Marker(marker) => {
            let mut fields = json!({ "text": marker.describe() });
            merge(&mut fields, marker_json(marker));
            (marker.name(), fields)
        }
    };
    let mut value =
        json!({ "kind": kind, "seq": entry.seq, "turn": entry.turn, "step": entry.step });
    merge(&mut value, fields);
    value
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(body) => body_json("text", body, json!({})),
        Block::Reasoning(body) => body_json("reasoning", body, json!({})),
        Block::ToolCall {
            id,
            name,
            arguments,
        } => body_json("tool-call", arguments, json!({ "id": id, "name": name })),
        Block::ToolResult {
            tool_call_id,
            name,
            is_error,
            content,
        } => {
            let extra = json!({ "toolCallId": tool_call_id, "name": name, "isError": is_error });
            body_json("tool-result", content, extra)
        }
        Block::Attachment { kind, description } => json!({ "type": kind, "text": description }),
        Block::Other { tag } => json!({ "type": tag, "text": format!("[{tag} block]") }),
    }
}

/// `{"type", ...extra, "text", "cutBytes"}`.
fn body_json(tag: &str, body: &Body, extra: Value) -> Value {
    let mut value = json!({ "type": tag });
    merge(&mut value, extra);
    merge(
        &mut value,
        json!({ "text": body.text, "cutBytes": body.cut_bytes }),
    );
    value
}

/// The fields particular to each marker kind.
fn marker_json(marker: &Marker) -> Value {
    match marker {
        Marker::TurnStart { .. } => json!({}),
        Marker::TurnEnd { reason, .. } => json!({ "reason": reason }),
        Marker::Prompt(p) | Marker::PromptAppend(p) => {
            json!({ "bytes": p.size_bytes, "excerpt": p.excerpt })
        }
        Marker::PromptRewrite {
            replaced_seq,
            head,
            prompt,
        } => json!({
            "replacedSeq": replaced_seq,
            "head": head,
            "bytes": prompt.size_bytes,
            "excerpt": prompt.excerpt,
        }),
        Marker::PromptClear { replaced_seq } => json!({ "replacedSeq": replaced_seq }),
        Marker::Compaction(c) => json!({
            "compactionId": c.id,
            "shadowedSeqs": c.shadowed_seqs,
            "shadowedTokens": c.shadowed_tokens,
            "summaryBytes": c.summary_bytes,
            "checkpointSeq": c.checkpoint_seq,
            "endSeq": c.end_seq,
            "error": c.error,
        }),
        Marker::Prune {
            shadowed_seqs,
            shadowed_tokens,
            rewrite_seq,
        } => json!({
            "shadowedSeqs": shadowed_seqs,
            "shadowedTokens": shadowed_tokens,
            "rewriteSeq": rewrite_seq,
        }),
        Marker::Attempt { finish } => json!({ "finish": finish }),
        Marker::Retry {
            retry,
            retries_max,
            delay_ms,
            failure,
        } => json!({
            "retry": retry,
            "maxRetries": retries_max,
            "delayMs": delay_ms,
            "failure": failure,
        }),
        Marker::Replace {
            event_type,
            start_seq,
            end_seq,
        } => json!({ "eventType": event_type, "startSeq": start_seq, "endSeq": end_seq }),
    }
}

/// Moves the members of the object `from` into the object `into`.
fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}
