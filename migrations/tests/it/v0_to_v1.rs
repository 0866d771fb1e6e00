//! The V0 -> V1 edge (issue #5): each normalisation, each refusal, and dsh's V0 recordings.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_format::row::{decode_row, encode_row, Decoded, RowContext};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    read_log, Event, EventData, EventType, FormatVersion, Log, Message, ReadOptions, SessionFold,
    SessionHeader, SurfaceOp,
};
use sessionlog_migrations::{Refusal, Stage, StageOptions, V0ToV1};

use crate::support::fixtures_dir;

/// An unseeded V0 header for session `legacy`.
const LEGACY: &str =
    r#"{"type":"session","version":0,"id":"legacy","createdAt":1,"delegationDepth":0}"#;

/// A seeded V0 child of `parent` whose first two events are inherited.
const CHILD: &str = r#"{"type":"session","version":0,"id":"child","createdAt":1,"parentSession":"parent","seedLength":2,"delegationDepth":1}"#;

fn header(text: &str) -> SessionHeader {
    serde_json::from_str(text).expect("test headers are valid JSON")
}

/// One V0 row as the reader decodes it. Rows whose legacy payload `format` cannot type (the
/// flat `assistant/message` and `tool/result`) are built with an opaque payload instead, as
/// the stage also accepts them.
fn event(row: &Value) -> Event {
    let text = row.to_string();
    let ctx = RowContext {
        version: FormatVersion::V0,
        snapshot: false,
        skim: false,
    };
    let seq = row["seq"].as_u64().expect("test rows carry seq");
    match decode_row(text.as_bytes(), ctx, seq) {
        Ok(Decoded::One(event)) => *event,
        Ok(Decoded::Packed(_)) => panic!("test rows are not packed"),
        Err(_) => opaque_event(row),
    }
}

fn opaque_event(row: &Value) -> Event {
    let surface_op = match &row["surfaceOp"] {
        Value::Null => None,
        Value::String(_) => Some(SurfaceOp::Append),
        op => Some(SurfaceOp::Replace {
            start_seq: op["start"].as_u64().expect("replace start"),
            end_seq: op["end"].as_u64().expect("replace end"),
        }),
    };
    let sources = row["sourceEventSeqs"].as_array().map(|seqs| {
        let seqs = seqs.iter().map(|s| s.as_u64().expect("plain seqs"));
        seqs.collect()
    });
    Event {
        seq: row["seq"].as_u64().expect("test rows carry seq"),
        time: row["time"].as_i64().expect("test rows carry time"),
        kind: EventType::parse(row["type"].as_str().expect("test rows carry type")),
        data: EventData::Other(row["data"].clone()),
        ignorable: row["ignorable"] == json!(true),
        source_event_seqs: sources,
        surface_op,
    }
}

/// One event as its V1 row, parsed back to JSON.
fn v1_row(event: &Event) -> Value {
    let mut out = Vec::new();
    encode_row(event, FormatVersion::V1, &mut out);
    serde_json::from_slice(&out).expect("an encoded row is JSON")
}

/// Runs the stage over `rows` under `header_text`: the V1 header, the V1 rows and the cut.
fn migrate(header_text: &str, rows: &[Value]) -> Result<(SessionHeader, Vec<Value>, u64), Refusal> {
    let mut stage = V0ToV1::new(StageOptions::default());
    let header = stage.header(header(header_text))?;
    let mut out = Vec::new();
    for row in rows {
        stage.push(event(row), &mut out)?;
    }
    let finish = stage.finish(&mut out)?;
    Ok((header, out.iter().map(v1_row).collect(), finish.cut))
}

/// The V1 rows of an unseeded `legacy` log.
fn check(rows: &[Value]) -> Vec<Value> {
    let (header, out, cut) = migrate(LEGACY, rows).expect("the log migrates");
    assert_eq!(header.version, Some(1));
    assert_eq!(cut, 0);
    assert_eq!(out.len(), rows.len(), "one V1 event per V0 event");
    out
}

/// The refusal of an unseeded `legacy` log, as `(seq, text)`.
fn refusal(rows: &[Value]) -> (Option<u64>, String) {
    let refusal = migrate(LEGACY, rows).expect_err("the log is refused");
    assert_eq!(refusal.from, FormatVersion::V0);
    assert_eq!(refusal.to, FormatVersion::V1);
    (refusal.seq, refusal.to_string())
}

fn turn_start(seq: u64) -> Value {
    json!({"type": "turn/start", "seq": seq, "time": seq + 1, "data": {"turn": 1}})
}

// Goal: a canonical V0 log changes only its header version; every row is kept as written.
// Method: a log with surface events, provenance, opaque members and a delivery marker.
#[test]
fn canonical_log_changes_only_the_version() {
    let rows = vec![
        turn_start(0),
        json!({"type": "user/message", "seq": 1, "time": 2, "surfaceOp": "append", "data": {
            "id": "human", "role": "user", "content": [{"type": "text", "text": "hello"}],
            "source": {"kind": "user"}}}),
        json!({"type": "step/start", "seq": 2, "time": 3, "data": {"turn": 1, "step": 1}}),
        json!({"type": "assistant/chunk", "seq": 3, "time": 4, "data": {"turn": 1, "step": 1,
            "chunk": {"type": "text-delta", "index": 0, "text": "hello"}}}),
        json!({"type": "assistant/message", "seq": 4, "time": 5, "sourceEventSeqs": [3],
            "surfaceOp": "append", "data": {"turn": 1, "step": 1, "message": {
                "id": "assistant", "role": "assistant", "content": [{"type": "text", "text": "hello"}],
                "source": {"kind": "model", "provider": "mock", "model": "mock"}}}}),
        json!({"type": "tool/result", "seq": 5, "time": 6, "surfaceOp": "append", "data": {
            "turn": 1, "step": 1, "meta": {"opaque": {"seq": 999}}, "message": {
                "id": "result", "role": "user", "source": {"kind": "tool", "callId": "call"},
                "content": [{"type": "tool-result", "toolCallId": "call", "content": [], "isError": false}]}}}),
        json!({"type": "step/end", "seq": 6, "time": 7, "data": {"turn": 1, "step": 1}}),
        json!({"type": "session-log-deepseek/delivery-accepted", "seq": 7, "time": 8,
            "data": {"sessionId": "legacy", "throughSeq": 6}}),
        json!({"type": "turn/end", "seq": 8, "time": 9, "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ];
    assert_eq!(check(&rows), rows);
}

// Goal: wrapped steering is unwrapped and flat steering gains a deterministic id and role.
// Method: one of each; the flat one is named after its seq.
#[test]
fn steering_becomes_user_message() {
    let wrapped = json!({"id": "wrapped", "role": "user",
        "content": [{"type": "text", "text": "wrapped"}], "source": {"kind": "user"}});
    let rows = vec![
        turn_start(0),
        json!({"type": "steering/message", "seq": 1, "time": 2, "surfaceOp": "append",
            "data": {"turn": 1, "message": wrapped}}),
        json!({"type": "steering/message", "seq": 2, "time": 3, "surfaceOp": "append",
            "data": {"turn": 1, "content": [{"type": "text", "text": "flat"}], "source": {"kind": "user"}}}),
    ];
    let out = check(&rows);
    let user = |seq: u64, data: Value| json!({"type": "user/message", "seq": seq, "time": seq + 1, "surfaceOp": "append", "data": data});
    assert_eq!(out[1], user(1, wrapped));
    let flat = json!({"id": "legacy-message:legacy:2", "role": "user",
        "content": [{"type": "text", "text": "flat"}], "source": {"kind": "user"}});
    assert_eq!(out[2], user(2, flat));
}

// Goal: `turn/start.trigger` is dropped.
// Method: a start with a trigger; the output holds only the turn.
#[test]
fn turn_start_trigger_is_dropped() {
    let rows = vec![json!({"type": "turn/start", "seq": 0, "time": 1,
        "data": {"turn": 1, "trigger": {"kind": "message"}}})];
    assert_eq!(check(&rows)[0], turn_start(0));
}

// Goal: every retired `turn/end` reason becomes its current form; current ones are kept.
// Method: dsh's seven legacy reasons plus a current `aborted` and an unknown future kind.
#[test]
fn turn_end_reasons_are_converted() {
    let reasons = [
        (json!({"kind": "completed"}), json!({"kind": "completed"})),
        (
            json!({"kind": "error", "step": 1, "failure": {"message": "provider", "code": "SERVER"}}),
            json!({"kind": "error", "error": {"message": "provider", "code": "SERVER"}}),
        ),
        (
            json!({"kind": "aborted"}),
            json!({"kind": "aborted", "reason": {"kind": "legacy"}}),
        ),
        (
            json!({"kind": "disposed"}),
            json!({"kind": "aborted", "reason": {"kind": "disposed"}}),
        ),
        (
            json!({"kind": "error", "step": 1, "message": "thrown"}),
            json!({"kind": "error", "error": {"message": "thrown", "code": "UNKNOWN"}}),
        ),
        (
            json!({"kind": "error", "step": 0, "failure": {"message": "detailed", "code": "RATE_LIMIT",
                "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}}),
            json!({"kind": "error", "error": {"message": "detailed", "code": "RATE_LIMIT",
                "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}}),
        ),
        (
            json!({"kind": "error", "step": 0, "message": "coded", "code": "CODED"}),
            json!({"kind": "error", "error": {"message": "coded", "code": "CODED"}}),
        ),
        (
            json!({"kind": "aborted", "reason": {"kind": "user"}}),
            json!({"kind": "aborted", "reason": {"kind": "user"}}),
        ),
        (
            json!({"kind": "future-reason"}),
            json!({"kind": "future-reason"}),
        ),
    ];
    let end = |reason: &Value| json!({"type": "turn/end", "seq": 0, "time": 1, "data": {"turn": 1, "reason": reason}});
    for (source, target) in &reasons {
        assert_eq!(check(&[end(source)])[0], end(target), "from {source}");
    }
}

// Goal: the obsolete `request/header.header.messagePrefix` is dropped, nothing else changes.
// Method: a header with a prefix, compared with the same header without it.
#[test]
fn message_prefix_is_dropped() {
    let row = |prefix: bool| {
        let mut header = json!({"config": {"provider": "mock", "model": "mock"}, "system": "s"});
        if prefix {
            header["messagePrefix"] = json!([{"role": "user", "content": []}]);
        }
        json!({"type": "request/header", "seq": 1, "time": 2, "data": {"header": header, "reason": "initial"}})
    };
    assert_eq!(check(&[turn_start(0), row(true)])[1], row(false));
}

// Goal: `compact/*` is renamed and an id-less group gets one id: the start's seq.
// Method: dsh's group (start, summary, prune, checkpoint, end) under the old names, then
// under the current names; both give the same V1 rows.
#[test]
fn compaction_names_and_group_ids() {
    let rows = |prefix: &str| {
        vec![
            json!({"type": format!("{prefix}/start"), "seq": 0, "time": 1, "data": {"turn": null}}),
            json!({"type": format!("{prefix}/summary"), "seq": 1, "time": 2, "data": {
                "summary": [{"type": "text", "text": "summary"}], "shadowedRange": {"start": 0, "end": 0},
                "shadowedSeqs": [0], "shadowedTokenCount": 0, "provider": "p", "model": "m"}}),
            json!({"type": format!("{prefix}/prune"), "seq": 2, "time": 3, "data": {
                "shadowedRange": {"start": 0, "end": 0}, "shadowedSeqs": [0], "shadowedTokenCount": 1}}),
            json!({"type": "user/message", "seq": 3, "time": 4, "sourceEventSeqs": [0, 1],
                "surfaceOp": {"op": "replace", "start": 0, "end": 0}, "data": {
                    "id": "checkpoint", "role": "user", "content": [{"type": "text", "text": "summary"}],
                    "source": {"kind": "plugin", "plugin": "compact"}}}),
            json!({"type": format!("{prefix}/end"), "seq": 4, "time": 5, "data": {"turn": null}}),
        ]
    };
    let out = check(&rows("compact"));
    let id = json!("legacy-compaction:legacy:0");
    let kinds: Vec<&Value> = out.iter().map(|row| &row["type"]).collect();
    let names = [
        "compaction/start",
        "compaction/summary",
        "compaction/prune",
        "user/message",
        "compaction/end",
    ];
    assert_eq!(kinds, names.map(|n| json!(n)).iter().collect::<Vec<_>>());
    assert_eq!(out[0]["data"], json!({"turn": null, "compactionId": id}));
    assert_eq!(out[1]["data"]["compactionId"], id);
    assert_eq!(out[2]["data"].get("compactionId"), None);
    assert_eq!(out[3]["data"]["source"]["compactionId"], id);
    assert_eq!(out[4]["data"], json!({"turn": null, "compactionId": id}));
    assert_eq!(check(&rows("compaction")), out);
}

// Goal: a seed end closes an open compaction group: a later summary gets no inherited id.
// Method: start, seed end, then an id-less summary, which the payload check refuses.
#[test]
fn seed_end_closes_the_compaction_group() {
    let rows = [
        json!({"type": "compact/start", "seq": 0, "time": 1, "data": {"turn": null}}),
        json!({"type": "session/end-seed", "seq": 1, "time": 2, "data": {}}),
        json!({"type": "compact/summary", "seq": 2, "time": 3, "data": {
            "summary": [], "shadowedRange": {"start": 0, "end": 0},
            "shadowedSeqs": [0], "shadowedTokenCount": 0, "provider": "p", "model": "m"}}),
    ];
    let text = r#"compaction/summary 2 data lacks required member "compactionId""#;
    assert_eq!(refusal(&rows), (Some(2), text.to_owned()));
}

fn retry(seq: u64, attempt: u64, retry_id: Option<Value>) -> Value {
    let mut data = json!({"turn": 1, "step": 1, "provider": "p", "mode": "normal",
        "policyKey": "k", "retry": attempt, "maxRetries": 2, "delayMs": 0,
        "failure": {"message": "retry", "code": "SERVER"}});
    if let Some(id) = retry_id {
        data["retryId"] = id;
    }
    json!({"type": "llm/retry", "seq": seq, "time": seq + 1, "data": data})
}

// Goal: id-less retries of one chain share the id of the chain's first retry.
// Method: two attempts of one chain; both get `legacy-retry:legacy:0`.
#[test]
fn retry_chain_ids() {
    let out = check(&[retry(0, 1, None), retry(1, 2, None)]);
    assert_eq!(out[0]["data"]["retryId"], json!("legacy-retry:legacy:0"));
    assert_eq!(out[1]["data"]["retryId"], json!("legacy-retry:legacy:0"));
    let named = check(&[retry(0, 1, Some(json!("r1"))), retry(1, 2, None)]);
    assert_eq!(named[1]["data"]["retryId"], json!("r1"));
}

// Goal: an explicitly invalid retry id is refused, never replaced.
// Method: `retryId: null`.
#[test]
fn invalid_retry_id_is_refused() {
    let text = "llm/retry 0 retryId must be a non-empty string";
    assert_eq!(
        refusal(&[retry(0, 1, Some(Value::Null))]),
        (Some(0), text.to_owned())
    );
}

// Goal: pre-identity user, assistant and tool-result messages gain the current wrappers and
// deterministic ids; a replacing tool result inherits the id of the node it replaces.
// Method: dsh's legacy scenario with a flat result replaced by a pruned one.
#[test]
fn pre_identity_messages_gain_wrappers() {
    let flat_result = |seq: u64, text: &str, op: Value| {
        json!({"type": "tool/result", "seq": seq, "time": seq + 1, "surfaceOp": op,
            "sourceEventSeqs": [seq - 1], "data": {"turn": 1, "step": 1, "callId": "call-1",
                "content": [{"type": "text", "text": text}], "isError": false}})
    };
    let rows = vec![
        turn_start(0),
        json!({"type": "user/message", "seq": 1, "time": 2, "surfaceOp": "append",
            "data": {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}}),
        json!({"type": "step/start", "seq": 2, "time": 3, "data": {"turn": 1, "step": 1}}),
        json!({"type": "assistant/message", "seq": 3, "time": 4, "surfaceOp": "append", "data": {
            "turn": 1, "step": 1,
            "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
            "provenance": {"provider": "mock", "model": "mock"}}}),
        json!({"type": "tool/call", "seq": 4, "time": 5,
            "data": {"turn": 1, "step": 1, "callId": "call-1", "name": "read", "arguments": "{}"}}),
        flat_result(5, "full", json!("append")),
        flat_result(6, "pruned", json!({"op": "replace", "start": 5, "end": 5})),
    ];
    let out = check(&rows);
    assert_eq!(
        out[1]["data"],
        json!({"id": "legacy-message:legacy:1", "role": "user",
            "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}})
    );
    assert_eq!(
        out[3]["data"],
        json!({"turn": 1, "step": 1, "message": {"id": "legacy-message:legacy:3", "role": "assistant",
            "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
            "source": {"provider": "mock", "model": "mock", "kind": "model"}}})
    );
    let result = |id: &str, text: &str| {
        json!({"turn": 1, "step": 1, "message": {"id": id, "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "call-1",
                "content": [{"type": "text", "text": text}], "isError": false}],
            "source": {"kind": "tool", "callId": "call-1"}}})
    };
    assert_eq!(out[5]["data"], result("legacy-message:legacy:5", "full"));
    assert_eq!(out[6]["data"], result("legacy-message:legacy:5", "pruned"));
    assert_eq!(
        out[6]["surfaceOp"],
        json!({"op": "replace", "start": 5, "end": 5})
    );
}

// Goal: the retired types and the fallback reason are refused with dsh's texts and seqs.
// Method: each after one accepted event, so the refusal names seq 1.
#[test]
fn retired_forms_are_refused() {
    let cases = [
        (
            json!({"type": "request/header-delta", "seq": 1, "time": 1, "data": {"config": {"model": "legacy"}}}),
            r#"session "legacy" contains unsupported legacy request/header-delta event at seq 1"#,
        ),
        (
            json!({"type": "mode/set", "seq": 1, "time": 1, "data": {"mode": "plan"}}),
            r#"session "legacy" contains unsupported legacy mode/set event at seq 1"#,
        ),
        (
            json!({"type": "request/header", "seq": 1, "time": 1,
                "data": {"header": {"config": {"model": "legacy"}}, "reason": "fallback"}}),
            r#"session "legacy" contains unsupported request/header reason "fallback" at seq 1"#,
        ),
    ];
    for (row, text) in cases {
        assert_eq!(refusal(&[turn_start(0), row]), (Some(1), text.to_owned()));
    }
}

// Goal: an unknown type is refused even when ignorable, and so is a current-only type.
// Method: an ignorable plugin event, a required one, and `assistant/attempt` (V2+).
#[test]
fn unknown_events_are_refused_even_when_ignorable() {
    let text = |kind: &str| {
        format!(
            "format v0 contains unknown historical event type \"{kind}\" at seq 1; migration \
             refuses unknown historical events even when ignorable"
        )
    };
    let ignorable =
        json!({"type": "plugin/note", "seq": 1, "time": 2, "ignorable": true, "data": {}});
    assert_eq!(
        refusal(&[turn_start(0), ignorable]),
        (Some(1), text("plugin/note"))
    );
    let required = json!({"type": "plugin/note", "seq": 1, "time": 2, "data": {}});
    assert_eq!(
        refusal(&[turn_start(0), required]),
        (Some(1), text("plugin/note"))
    );
    let attempt = json!({"type": "assistant/attempt", "seq": 1, "time": 2,
        "data": {"turn": 1, "step": 1, "stream": []}});
    assert_eq!(
        refusal(&[turn_start(0), attempt]),
        (Some(1), text("assistant/attempt"))
    );
}

// Goal: malformed legacy forms are refused, never repaired.
// Method: dsh's malformed cases, each with its exact text.
#[test]
fn malformed_legacy_forms_are_refused() {
    let malformed = |kind: &str| {
        format!("session \"legacy\" contains malformed pre-react-loop {kind} at seq 0")
    };
    let end = |data: Value| json!({"type": "turn/end", "seq": 0, "time": 1, "data": data});
    let cases = [
        (
            json!({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1, "trigger": null}}),
            "turn/start 0 trigger must be a JSON object".to_owned(),
        ),
        (
            json!({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 0, "trigger": {"kind": "message"}}}),
            malformed("turn/start"),
        ),
        (
            json!({"type": "steering/message", "seq": 0, "time": 1, "surfaceOp": "append",
                "data": {"turn": 1, "content": [], "source": {"kind": "user"}, "extra": true}}),
            r#"steering/message 0 data has unexpected member "extra""#.to_owned(),
        ),
        (
            end(json!({"turn": 1, "reason": {"kind": "completed", "extra": true}})),
            r#"turn/end 0 reason has unexpected member "extra""#.to_owned(),
        ),
        (
            end(json!({"turn": 1, "reason": null})),
            "turn/end 0 reason must be a JSON object".to_owned(),
        ),
        (
            end(json!({"turn": 1, "step": 1, "reason": {"kind": "completed"}})),
            r#"turn/end 0 data has unexpected member "step""#.to_owned(),
        ),
        (
            end(json!({"turn": 1, "reason": {"kind": "disposed", "extra": true}})),
            r#"turn/end 0 reason has unexpected member "extra""#.to_owned(),
        ),
        (
            end(json!({"turn": 1, "reason": {"kind": "error", "step": -1, "message": "bad"}})),
            "turn/end 0 error step must be a non-negative safe integer".to_owned(),
        ),
        (
            end(
                json!({"turn": 1, "reason": {"kind": "error", "step": 0, "message": "bad", "code": 1}}),
            ),
            malformed("turn/end"),
        ),
        (
            end(
                json!({"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": 1, "code": "X"}}}),
            ),
            malformed("turn/end"),
        ),
        (
            end(json!({"turn": 0, "reason": {"kind": "completed"}})),
            malformed("turn/end"),
        ),
        (
            end(json!({"turn": 1, "reason": {"kind": 1}})),
            malformed("turn/end"),
        ),
        (
            json!({"type": "request/header", "seq": 0, "time": 1, "data": {
                "header": {"config": {"provider": "mock", "model": "mock"}, "messagePrefix": "bad"},
                "reason": "initial"}}),
            r#"session "legacy" contains malformed request/header messagePrefix at seq 0"#
                .to_owned(),
        ),
    ];
    for (row, text) in cases {
        assert_eq!(
            refusal(std::slice::from_ref(&row)),
            (Some(0), text),
            "for {row}"
        );
    }
}

// Goal: a legacy replacement must cite a message with an identity.
// Method: a flat tool result replacing `turn/start`, which carries no message.
#[test]
fn replacement_without_identity_is_refused() {
    let result = json!({"type": "tool/result", "seq": 1, "time": 2, "sourceEventSeqs": [0],
        "surfaceOp": {"op": "replace", "start": 0, "end": 0},
        "data": {"turn": 1, "step": 0, "callId": "call", "content": [], "isError": false}});
    let text = "tool/result 1 replacement cites a message without identity";
    assert_eq!(
        refusal(&[turn_start(0), result]),
        (Some(1), text.to_owned())
    );
}

// Goal: a V0 delivery marker names its own session unless inherited; V1's
// `sessionFormatVersion` member does not exist in V0.
// Method: a marker naming another session in an unseeded log, the same inside a child's
// inherited prefix (accepted) and after it (refused), and a marker with a format version.
#[test]
fn delivery_markers() {
    let marker = |seq: u64, data: Value| json!({"type": "session-log-deepseek/delivery-accepted", "seq": seq, "time": 2, "data": data});
    let parent = json!({"sessionId": "parent", "throughSeq": 0});
    let text = "current-generation delivery marker names the wrong Session";
    let rows = [turn_start(0), marker(1, parent.clone())];
    assert_eq!(refusal(&rows), (Some(1), text.to_owned()));
    let (header, out, cut) = migrate(CHILD, &rows).expect("an inherited marker is accepted");
    assert_eq!(
        (header.version, header.seed_length, cut),
        (Some(1), Some(2), 2)
    );
    assert_eq!(out[1], rows[1]);
    let late = [turn_start(0), turn_start(1), marker(2, parent)];
    let late = migrate(CHILD, &late).expect_err("a marker after the cut is current");
    assert_eq!((late.seq, late.to_string()), (Some(2), text.to_owned()));
    let versioned = json!({"sessionId": "legacy", "throughSeq": 0, "sessionFormatVersion": 1});
    let text = r#"session-log-deepseek/delivery-accepted 1 data has unexpected member "sessionFormatVersion""#;
    assert_eq!(
        refusal(&[turn_start(0), marker(1, versioned)]),
        (Some(1), text.to_owned())
    );
}

// Goal: the header must be a released V0 header, and a seed cannot be longer than the log.
// Method: a V1 header, then a child whose `seedLength` exceeds its single event.
#[test]
fn header_and_cut_refusals() {
    let v1 = r#"{"type":"session","version":1,"id":"x","createdAt":1,"delegationDepth":0}"#;
    let refused = migrate(v1, &[]).expect_err("a v1 header is refused");
    assert_eq!(
        (refused.seq, refused.to_string()),
        (None, "expected format v0 header".to_owned())
    );
    let refused = migrate(CHILD, &[turn_start(0)]).expect_err("the cut is past the end");
    assert_eq!(
        refused.to_string(),
        "Session inheritedEventCount exceeds its event count"
    );
}

/// The derived messages after every `request/header` and at the end of `events`.
fn derived(events: &[Event], ctx: RuleContext) -> Vec<Vec<Message>> {
    let mut fold = SessionFold::new(ctx);
    let mut views = Vec::new();
    for event in events {
        fold.admit(Arc::new(event.clone()))
            .unwrap_or_else(|v| panic!("event {} is admitted: {v}", event.seq));
        if matches!(event.data, EventData::RequestHeader(_)) {
            views.push(fold.messages().into_iter().cloned().collect());
        }
    }
    views.push(fold.messages().into_iter().cloned().collect());
    views
}

/// The V0 logs dsh's manifest accepts.
fn accepted_v0_fixtures(dir: &std::path::Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("manifest is readable");
    let rows = manifest
        .lines()
        .skip(1)
        .map(|line| line.split('\t').collect::<Vec<_>>());
    let v0 = rows.filter(|cols| cols.len() > 2 && cols[1] == "0" && cols[2] == "accept");
    v0.map(|cols| cols[0].to_owned()).collect()
}

/// Migrates one V0 log; on success checks that the output reads back as V1 and derives the
/// same messages at every request and at the end.
fn migrate_fixture(path: &str, log: &Log) -> Result<(), Refusal> {
    let options = StageOptions {
        snapshot: log.snapshot,
    };
    let mut stage = V0ToV1::new(options);
    let header = stage.header(log.header.clone())?;
    let mut out = Vec::new();
    for event in &log.events {
        stage.push(event.clone(), &mut out)?;
    }
    let finish = stage.finish(&mut out)?;
    assert_eq!(finish.cut, log.header.seed_length.unwrap_or(0), "{path}");
    assert_eq!(out, log.events, "{path}: canonical V0 is kept as written");
    let mut text = serde_json::to_vec(&header).expect("a header encodes");
    for event in &out {
        text.push(b'\n');
        encode_row(event, FormatVersion::V1, &mut text);
    }
    text.push(b'\n');
    let reread = read_log(text.as_slice(), ReadOptions::default())
        .unwrap_or_else(|e| panic!("{path} reads back as V1: {e}"));
    assert_eq!(reread.version, FormatVersion::V1);
    assert_eq!(reread.events, out, "{path}");
    let ctx = |version| RuleContext {
        version,
        snapshot: log.snapshot,
    };
    assert_eq!(
        derived(&log.events, ctx(FormatVersion::V0)),
        derived(&out, ctx(FormatVersion::V1)),
        "{path}"
    );
    Ok(())
}

// Goal: every V0 recording the manifest accepts migrates, keeping every event, reading back
// as valid V1 and deriving the same messages at every request and at the end. Two of them
// are fork children whose `subagent/descriptor` has version 2, which dsh's edge refuses and
// we keep (the manifest wins).
// Method: read each fixture, run the stage, encode the V1 log and read it back, then fold
// the source under V0 rules and the output under V1 rules.
#[test]
fn accepted_v0_fixtures_migrate() {
    let Some(dir) = fixtures_dir() else { return };
    let paths = accepted_v0_fixtures(&dir);
    assert_eq!(paths.len(), 13, "the manifest lists 13 accepted V0 logs");
    let mut n_descriptor_v2 = 0;
    for path in &paths {
        let bytes = std::fs::read(dir.join(path)).expect("fixture is readable");
        let log = read_log(bytes.as_slice(), ReadOptions::default())
            .unwrap_or_else(|e| panic!("{path} reads: {e}"));
        assert_eq!(log.version, FormatVersion::V0, "{path}");
        n_descriptor_v2 += log
            .events
            .iter()
            .filter(|e| {
                e.kind.as_str() == "subagent/descriptor"
                    && matches!(&e.data, EventData::Other(d) if d["version"] == 2)
            })
            .count();
        if let Err(refusal) = migrate_fixture(path, &log) {
            panic!("{path}: refused at seq {:?}: {refusal}", refusal.seq);
        }
    }
    assert_eq!(n_descriptor_v2, 2, "the two fork children are covered");
}
