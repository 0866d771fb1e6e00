//! The JSON documents the server answers with: the CLI's `--json` shapes where a command has
//! one (`messages`, `surface`, `verify`, `requests`), and small ones for the rest.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sessionlog_format::{Event, FormatVersion};

pub(crate) use sessionlog_engine::documents::{hex, messages, requests, surface, verify};
use sessionlog_engine::store::{AppendAck, Head, StoreError};

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

/// One event as a canonical row of its session's version (the `cat` form).
pub(crate) fn event_row(event: &Event, version: FormatVersion) -> String {
    let mut out = Vec::new();
    sessionlog_format::row::encode_row(event, version, &mut out);
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// `{"session","fromSeq","nextSeq","events":[row...]}`, rows written as they are encoded.
pub(crate) fn events(
    session: &str,
    version: FormatVersion,
    from_seq: u64,
    next_seq: u64,
    events: &[Event],
) -> String {
    let mut out = format!(
        "{{\"session\":{},\"fromSeq\":{from_seq},\"nextSeq\":{next_seq},\"events\":[",
        Value::from(session)
    );
    for (event_idx, event) in events.iter().enumerate() {
        if event_idx > 0 {
            out.push(',');
        }
        out.push_str(&event_row(event, version));
    }
    out.push_str("]}");
    out
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
        // An import created the session and has not finished it: not a session yet, and
        // only a rerun of the import completes it.
        StoreError::ImportInterrupted { session } => (
            StatusCode::CONFLICT,
            "import-interrupted",
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
                "eventsMax": sessionlog_engine::store::BATCH_EVENTS_MAX }),
        ),
        StoreError::InvalidHeader { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-header",
            json!({}),
        ),
        StoreError::InvalidSessionId { session, reason } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-session-id",
            json!({ "session": session, "reason": reason }),
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
