//! The JSON documents the server answers with: the CLI's `--json` shapes where a command has
//! one (`messages`, `surface`, `verify`, `requests`), and small ones for the rest.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sessionlog_format::record::ChainHash;
use sessionlog_format::{Event, FormatVersion};

use crate::inspect::FoldedSession;
use crate::requests::{RequestReport, RequestRow, RequestSummary};
use crate::store::verify::SessionReport;
use crate::store::{AppendAck, Head, StoreError};

/// Lowercase hex of a chain hash, as `verify` prints it.
pub(crate) fn hex(hash: &ChainHash) -> String {
    use std::fmt::Write;
    hash.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// A JSON response with a status.
pub(crate) fn respond(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `{"error": kind, "message": text}`.
pub(crate) fn error_body(kind: &str, message: &str) -> axum::Json<Value> {
    axum::Json(json!({ "error": kind, "message": message }))
}

pub(crate) fn head(session: &str, head: &Head) -> Value {
    json!({
        "session": session,
        "nextSeq": head.next_seq,
        "headHash": hex(&head.chain),
    })
}

pub(crate) fn ack(ack: &AppendAck) -> Value {
    json!({
        "session": ack.session,
        "firstSeq": ack.first_seq,
        "nextSeq": ack.next_seq,
        "headHash": hex(&ack.head_chain),
    })
}

/// One event as a canonical V3 row (the `cat` form).
pub(crate) fn event_row(event: &Event) -> String {
    let mut out = Vec::new();
    sessionlog_format::row::encode_row(event, FormatVersion::V3, &mut out);
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// `{"session","fromSeq","nextSeq","events":[row...]}`, rows written as they are encoded.
pub(crate) fn events(session: &str, from_seq: u64, next_seq: u64, events: &[Event]) -> String {
    let mut out = format!(
        "{{\"session\":{},\"fromSeq\":{from_seq},\"nextSeq\":{next_seq},\"events\":[",
        Value::from(session)
    );
    for (event_idx, event) in events.iter().enumerate() {
        if event_idx > 0 {
            out.push(',');
        }
        out.push_str(&event_row(event));
    }
    out.push_str("]}");
    out
}

/// CLI.md's `messages` document.
pub(crate) fn messages(folded: &FoldedSession) -> Result<Value, serde_json::Error> {
    let messages: Vec<Value> = folded
        .messages()
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    Ok(json!({ "session": folded.session, "atSeq": folded.at_seq, "messages": messages }))
}

/// CLI.md's `surface` document.
pub(crate) fn surface(folded: &FoldedSession) -> Value {
    json!({
        "session": folded.session,
        "atSeq": folded.at_seq,
        "nodes": folded.nodes(),
        "replaceGeneration": folded.fold.replace_generation(),
    })
}

/// CLI.md's `verify` document.
pub(crate) fn verify(reports: &[SessionReport]) -> Value {
    let sessions: Vec<Value> = reports
        .iter()
        .map(|report| {
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
        })
        .collect();
    json!({ "sessions": sessions })
}

/// CLI.md's `requests` document (without the DeepSeek wire `body`).
pub(crate) fn requests(report: &RequestReport) -> Result<Value, serde_json::Error> {
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
    Ok(json!({
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
    }))
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

/// The status and body of a store error. A conflict's body is completed with the current
/// head by the caller (see `routes::append`).
pub(crate) fn store_error(error: &StoreError) -> (StatusCode, Value) {
    let message = error.to_string();
    let (status, kind, extra) = match error {
        StoreError::UnknownSession { session } => (
            StatusCode::NOT_FOUND,
            "unknown-session",
            json!({ "session": session }),
        ),
        StoreError::SessionExists { session } => (
            StatusCode::CONFLICT,
            "session-exists",
            json!({ "session": session }),
        ),
        StoreError::Conflict {
            session,
            expected,
            current,
        } => (
            StatusCode::CONFLICT,
            "conflict",
            json!({ "session": session, "expectedNextSeq": expected, "nextSeq": current }),
        ),
        StoreError::Rejected {
            session,
            seq,
            violation,
        } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "rejected",
            json!({ "session": session, "seq": seq, "rule": violation.rule.name(),
                "reason": violation.message }),
        ),
        StoreError::BatchTooLarge { session, n_events } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch-too-large",
            json!({ "session": session, "events": n_events,
                "eventsMax": crate::store::BATCH_EVENTS_MAX }),
        ),
        StoreError::InvalidHeader { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-header",
            json!({}),
        ),
        StoreError::SeqOutOfRange {
            session,
            seq,
            next_seq,
        } => (
            StatusCode::NOT_FOUND,
            "seq-out-of-range",
            json!({ "session": session, "seq": seq, "nextSeq": next_seq }),
        ),
        StoreError::Poisoned => (StatusCode::SERVICE_UNAVAILABLE, "poisoned", json!({})),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "storage", json!({})),
    };
    let mut body = json!({ "error": kind, "message": message });
    if let (Some(object), Value::Object(extra)) = (body.as_object_mut(), extra) {
        object.extend(extra);
    }
    (status, body)
}
