//! The `--json` documents of `../shared/CLI.md`, built once from engine values, so that the
//! CLI and the server answer with the same shapes.

mod transcript;

use serde_json::{json, Value};

pub use self::transcript::{entry, transcript};
use crate::audit::{AuditRow, Integrity};
use crate::inspect::FoldedSession;
use crate::meter::{Breakdown, RequestBreakdown, TokensReport};
use crate::requests::{RequestReport, RequestRow, RequestSummary};
use crate::store::verify::SessionReport;
use crate::wire::deepseek_row_body;

/// Lowercase hex of a hash, as `headHash` carries it.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// `{"session","atSeq","messages":[<message>...]}`.
pub fn messages(folded: &FoldedSession) -> Result<Value, serde_json::Error> {
    let messages: Vec<Value> = folded
        .messages()
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    Ok(json!({ "session": folded.session, "atSeq": folded.at_seq, "messages": messages }))
}

/// [`messages`], written to `out` one message at a time: the same bytes as
/// `serde_json::to_writer(out, &messages(folded)?)`, without building the whole document as a
/// value tree first (that tree cost about 2.4 times the messages themselves).
pub fn write_messages(
    folded: &FoldedSession,
    out: &mut dyn std::io::Write,
) -> Result<(), serde_json::Error> {
    let head = json!({ "session": folded.session, "atSeq": folded.at_seq });
    let head = serde_json::to_string(&head)?;
    // `{"session":..,"atSeq":..}` less its closing brace, then the messages member.
    let open = &head[..head.len() - 1];
    out.write_all(open.as_bytes())
        .map_err(serde_json::Error::io)?;
    out.write_all(br#","messages":["#)
        .map_err(serde_json::Error::io)?;
    for (idx, message) in folded.messages().into_iter().enumerate() {
        if idx > 0 {
            out.write_all(b",").map_err(serde_json::Error::io)?;
        }
        serde_json::to_writer(&mut *out, message)?;
    }
    out.write_all(b"]}").map_err(serde_json::Error::io)
}

/// `{"session","atSeq","nodes":[<seq>...],"replaceGeneration"}`.
pub fn surface(folded: &FoldedSession) -> Value {
    json!({
        "session": folded.session,
        "atSeq": folded.at_seq,
        "nodes": folded.nodes(),
        "replaceGeneration": folded.fold.replace_generation(),
    })
}

/// One session of the `verify` document: `{"session","events","headHash","ok","faults"}`.
pub fn verify_session(report: &SessionReport) -> Value {
    let faults: Vec<Value> = report
        .faults
        .iter()
        .map(|f| json!({ "seq": f.seq, "kind": f.kind.name(), "message": f.message }))
        .collect();
    json!({
        "session": report.session,
        "events": report.events,
        "headHash": hex(&report.head_chain),
        "ok": report.ok(),
        "faults": faults,
    })
}

/// `{"sessions":[...]}` of `verify`.
pub fn verify(reports: &[SessionReport]) -> Value {
    json!({ "sessions": reports.iter().map(verify_session).collect::<Vec<_>>() })
}

/// `{"session","snapshot","requests":[...],"summary":{...}}` of `requests`. On a DeepSeek
/// route each row also carries `body`, the wire body the adapter's serializer rebuilds from
/// the log.
pub fn requests(report: &RequestReport) -> Result<Value, serde_json::Error> {
    let rows: Vec<Value> = report
        .requests
        .iter()
        .map(request_row)
        .collect::<Result<_, _>>()?;
    Ok(json!({
        "session": report.session,
        "snapshot": report.snapshot,
        "requests": rows,
        "summary": summary(&report.summary),
    }))
}

/// One row of `requests`.
pub fn request_row(row: &RequestRow) -> Result<Value, serde_json::Error> {
    let messages = row
        .messages
        .as_ref()
        .map(|messages| {
            messages
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let usage = row.usage.as_ref().map(serde_json::to_value).transpose()?;
    let mut out = json!({
        "index": row.index,
        "seq": row.seq,
        "turn": row.turn,
        "step": row.step,
        "settled": row.settled,
        "reason": row.reason,
        "config": row.config,
        "adapterDefaults": row.adapter_defaults,
        "tools": row.tools.as_deref(),
        "context": row.context,
        "messageCount": row.message_count,
        "estimatedTokens": row.estimated_tokens,
        "toolsTokens": row.tools_tokens,
        "messages": messages,
        "prefix": prefix(row),
        "usage": usage,
        "injected": injected(row),
    });
    if let (Some(body), Some(object)) = (deepseek_row_body(row), out.as_object_mut()) {
        object.insert("body".into(), body);
    }
    Ok(out)
}

/// One row of `requests` without what repeats per header (`config`, `adapterDefaults`,
/// `tools`, `context`) and without bodies: the server's `requests?compact=true`.
pub fn request_row_compact(row: &RequestRow) -> Result<Value, serde_json::Error> {
    let usage = row.usage.as_ref().map(serde_json::to_value).transpose()?;
    Ok(json!({
        "index": row.index,
        "seq": row.seq,
        "turn": row.turn,
        "step": row.step,
        "settled": row.settled,
        "reason": row.reason,
        "messageCount": row.message_count,
        "estimatedTokens": row.estimated_tokens,
        "toolsTokens": row.tools_tokens,
        "prefix": prefix(row),
        "usage": usage,
        "injected": injected(row),
    }))
}

fn prefix(row: &RequestRow) -> Value {
    let broken_by = row
        .prefix
        .broken_by
        .as_ref()
        .map(|b| json!({ "kind": b.name(), "seq": b.seq() }));
    json!({
        "messages": row.prefix.messages,
        "estimatedTokens": row.prefix.estimated_tokens,
        "brokenBy": broken_by,
    })
}

fn injected(row: &RequestRow) -> Vec<Value> {
    row.injected
        .iter()
        .map(|i| json!({ "message": i.message_idx, "source": i.source }))
        .collect()
}

/// The `summary` of `requests`.
pub fn summary(summary: &RequestSummary) -> Value {
    json!({
        "requests": summary.requests,
        "estimatedTokens": summary.estimated_tokens,
        "predictedReusedTokens": summary.predicted_reused_tokens,
        "predictedReuseRatio": summary.predicted_reuse_ratio,
        "recordedInputTokens": summary.recorded_input_tokens,
        "recordedCacheReadTokens": summary.recorded_cache_read_tokens,
        "promptAppends": summary.prompt_appends,
        "promptRewrites": summary.prompt_rewrites,
        "promptClears": summary.prompt_clears,
        "promptHistoryRewrites": summary.prompt_history_rewrites,
        "prefixBreaks": summary.prefix_breaks,
    })
}

/// `{"session","requests":[<tokens row>...],"head":{...}}` of `tokens`.
pub fn tokens(report: &TokensReport) -> Value {
    let requests: Vec<Value> = report.requests.iter().map(tokens_row).collect();
    json!({
        "session": report.session,
        "requests": requests,
        "head": breakdown(&report.head),
    })
}

/// One request of `tokens`: `{"index","seq","turn","step","systemTokens","messageTokens",
/// "toolsTokens","totalTokens"}`.
pub fn tokens_row(request: &RequestBreakdown) -> Value {
    let mut row = breakdown(&request.breakdown);
    if let Value::Object(map) = &mut row {
        map.insert("index".into(), json!(request.index));
        map.insert("seq".into(), json!(request.seq));
        map.insert("turn".into(), json!(request.turn));
        map.insert("step".into(), json!(request.step));
    }
    row
}

/// `{"systemTokens","messageTokens","toolsTokens","totalTokens"}`.
pub fn breakdown(b: &Breakdown) -> Value {
    json!({
        "systemTokens": b.system_tokens,
        "messageTokens": b.message_tokens,
        "toolsTokens": b.tools_tokens,
        "totalTokens": b.total(),
    })
}

/// One row of `audit --json`.
pub fn audit_row(row: &AuditRow) -> Value {
    let integrity = match &row.integrity {
        Integrity::Ok => json!({ "status": "ok" }),
        Integrity::Corrupt { line, seq, message } => {
            json!({ "status": "corrupt", "line": line, "seq": seq, "message": message })
        }
        Integrity::Refused { line, message } => {
            json!({ "status": "refused", "line": line, "message": message })
        }
    };
    json!({
        "path": row.path.as_ref().map(|p| p.display().to_string()),
        "relative": row.relative.as_ref().map(|p| p.display().to_string()),
        "session": row.session,
        "version": row.version,
        "events": row.events,
        "turns": row.turns,
        "requests": row.requests.requests,
        "promptVersions": row.prompt_versions,
        "promptAppends": row.requests.prompt_appends,
        "promptRewrites": row.requests.prompt_rewrites,
        "compactions": row.compactions,
        "integrity": integrity,
        "predictedReuse": (row.requests.requests > 0).then_some(row.requests.predicted_reuse_ratio),
        "estimatedTokens": row.requests.estimated_tokens,
        "recordedInputTokens": row.requests.recorded_input_tokens,
        "recordedCacheReadTokens": row.requests.recorded_cache_read_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
    }
}
