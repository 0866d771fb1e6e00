//! The `--json` documents of `../shared/CLI.md`, built once from engine values, so that the
//! CLI and the server answer with the same shapes.

use serde_json::{json, Value};

use crate::inspect::FoldedSession;
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

fn request_row(row: &RequestRow) -> Result<Value, serde_json::Error> {
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
    let broken_by = row
        .prefix
        .broken_by
        .as_ref()
        .map(|b| json!({ "kind": b.name(), "seq": b.seq() }));
    let injected: Vec<Value> = row
        .injected
        .iter()
        .map(|i| json!({ "message": i.message_idx, "source": i.source }))
        .collect();
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
        "prefix": {
            "messages": row.prefix.messages,
            "estimatedTokens": row.prefix.estimated_tokens,
            "brokenBy": broken_by,
        },
        "usage": usage,
        "injected": injected,
    });
    if let (Some(body), Some(object)) = (deepseek_row_body(row), out.as_object_mut()) {
        object.insert("body".into(), body);
    }
    Ok(out)
}

fn summary(summary: &RequestSummary) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
    }
}
