//! dsh V4 logs (dsh-v4.md): dsh's own V4 recordings read and round-trip losslessly, raw and
//! compressed; every native V4 row rule has an accepted and a refused case with dsh's text.

use std::path::PathBuf;

use pretty_assertions::assert_eq;
use sessionlog_format::row::encode_row;
use sessionlog_format::{read_log, FormatVersion, Log, ReadOptions, SnapshotMode};

/// The V4 fixtures (`../shared/fixtures/dsh-v4`), every `session*.v4.jsonl` under it.
fn v4_fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh-v4");
    if !dir.is_dir() {
        eprintln!(
            "skipping: {} is missing (the dsh V4 fixtures live beside the checkout)",
            dir.display()
        );
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut pending = vec![dir];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("fixture folder is readable") {
            let path = entry.expect("fixture entry is readable").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.to_string_lossy().ends_with(".v4.jsonl") {
                found.push(path);
            }
        }
    }
    found.sort();
    assert!(!found.is_empty(), "the V4 fixture folder holds no V4 log");
    found
}

fn encode(log: &Log) -> Vec<u8> {
    let mut out = serde_json::to_vec(&log.header).unwrap();
    out.push(b'\n');
    for event in &log.events {
        encode_row(event, log.version, &mut out);
        out.push(b'\n');
    }
    out
}

// Goal: dsh's V4 recordings are read as V4 under every rule, and decode -> encode -> decode
// keeps every event while our encoding is a fixed point.
// Method: read each fixture; re-encode it with the row codec; read that back (snapshot mode
// on, as the recording was); compare the logs and the bytes of a second encoding.
#[test]
fn v4_fixtures_read_and_round_trip() {
    for path in v4_fixtures() {
        let name = path.display().to_string();
        let bytes = std::fs::read(&path).unwrap();
        let log =
            read_log(&bytes[..], ReadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(log.version, FormatVersion::V4, "{name}");
        assert!(log.snapshot, "{name}: a normalized recording");
        assert_eq!(
            log.events.len(),
            bytes.iter().filter(|b| **b == b'\n').count() - 1
        );
        let encoded = encode(&log);
        let options = ReadOptions {
            snapshot: SnapshotMode::On,
            ..ReadOptions::default()
        };
        let again = read_log(&encoded[..], options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(again, log, "{name}");
        assert_eq!(encode(&again), encoded, "{name}");
    }
}

// Goal: a V4 log written compressed by our writer (one zstd frame per batch) reads back to the
// same events, and every V4 event survives the store's binary record codec unchanged.
// Method: write each fixture's events through `LogWriter` (snapshot mode, zstd), read the
// bytes back; encode each event as a store record with `record::encode_event` and decode it.
#[test]
fn v4_fixtures_survive_zstd_and_the_binary_record_codec() {
    use sessionlog_format::record::{decode_event, encode_event, genesis_chain};
    use sessionlog_format::{Compression, LogWriter, WriterOptions};
    for path in v4_fixtures() {
        let name = path.display().to_string();
        let log = read_log(std::fs::File::open(&path).unwrap(), ReadOptions::default()).unwrap();
        let options = WriterOptions {
            compression: Compression::Zstd,
            snapshot: true,
        };
        let mut writer = LogWriter::with_options(Vec::new(), &log.header, options).unwrap();
        writer
            .append_batch(&log.events)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let bytes = writer.into_inner().unwrap();
        let read_options = ReadOptions {
            snapshot: SnapshotMode::On,
            ..ReadOptions::default()
        };
        let again = read_log(&bytes[..], read_options).unwrap();
        assert!(again.compressed, "{name}");
        assert_eq!(again.events, log.events, "{name}");
        let mut chain = genesis_chain(&log.header);
        for event in &log.events {
            let mut record = Vec::new();
            let next = encode_event(event, &chain, &mut record).unwrap();
            let (decoded, decoded_chain) = decode_event(&record, &chain, event.seq).unwrap();
            assert_eq!(&decoded, event, "{name} seq {}", event.seq);
            assert_eq!(decoded_chain, next);
            chain = next;
        }
    }
}

use serde_json::{json, Value};

/// A valid V4 log exercising every V4 message shape: the system head, a human message, a
/// header with one complete tool, a call and its tool-role result, a developer message bound
/// to the header, closed turn.
fn base_rows() -> Vec<Value> {
    let step = |kind: &str| json!({"type": kind, "data": {"turn": 1, "step": 1}});
    vec![
        json!({"type": "turn/start", "data": {"turn": 1}}),
        step("step/start"),
        json!({"type": "system/message", "data": {"turn": 1, "step": 1, "message": {"role": "system",
            "content": [{"type": "text", "text": "be brief"}], "source": {"kind": "system-prompt"},
            "id": "m0"}}, "surfaceOp": "append"}),
        json!({"type": "user/message", "data": {"content": [{"type": "text", "text": "hi"}],
            "source": {"kind": "user"}, "role": "user", "id": "m1"}, "surfaceOp": "append"}),
        json!({"type": "request/header", "data": {"header": {"config": {"provider": "p", "model": "m"},
            "tools": [{"name": "t", "description": "d", "parameters": {}}]}, "reason": "initial"}}),
        json!({"type": "assistant/message", "data": {"turn": 1, "step": 1, "message": {"role": "assistant",
            "content": [{"type": "tool-call", "id": "c1", "name": "t", "arguments": "{}"}],
            "source": {"kind": "model", "provider": "p", "model": "m"}, "id": "m2"}, "stream": []},
            "surfaceOp": "append"}),
        json!({"type": "tool/call", "data": {"turn": 1, "step": 1, "callId": "c1", "name": "t", "arguments": "{}"}}),
        json!({"type": "tool/result", "data": {"turn": 1, "step": 1, "message": {"role": "tool",
            "source": {"kind": "tool", "callId": "c1"}, "toolCallId": "c1",
            "content": [{"type": "text", "text": "ok"}], "isError": false, "id": "m3"}},
            "surfaceOp": "append"}),
        json!({"type": "developer/message", "data": {"turn": 1, "step": 1, "message": {"role": "developer",
            "source": {"kind": "tool-registry"}, "content": [{"type": "tool-addition", "toolName": "t"}],
            "id": "m4"}, "headerSeq": 4}, "surfaceOp": "append"}),
        step("step/end"),
        json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ]
}

/// Reads `rows` (seq and time filled in) after a V4 header; the fault's message, if any.
fn check_rows(rows: &[Value]) -> Result<(), String> {
    check_rows_in(rows, SnapshotMode::Off)
}

/// The header of the rule tables' logs: unseeded.
const UNSEEDED_HEADER: &str =
    r#"{"type":"session","version":4,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;

/// [`check_rows`] in a snapshot mode.
fn check_rows_in(rows: &[Value], snapshot: SnapshotMode) -> Result<(), String> {
    check_log(UNSEEDED_HEADER, rows, snapshot)
}

/// Reads `header` and `rows` (seq and time filled in) as one V4 log; the first fault's text.
fn check_log(header: &str, rows: &[Value], snapshot: SnapshotMode) -> Result<(), String> {
    let mut text = String::from(header);
    for (seq, row) in rows.iter().enumerate() {
        let mut row = row.clone();
        let object = row.as_object_mut().unwrap();
        object.insert("seq".into(), json!(seq));
        object.insert("time".into(), json!(seq));
        text.push('\n');
        text.push_str(&row.to_string());
    }
    text.push('\n');
    let options = ReadOptions {
        snapshot,
        ..ReadOptions::default()
    };
    match read_log(text.as_bytes(), options) {
        Ok(_) => Ok(()),
        Err(sessionlog_format::ReadError::Fault(fault)) => Err(fault.message),
        Err(other) => Err(other.to_string()),
    }
}

/// Sets the member at the JSON pointer `path` of row `idx`.
fn set(rows: &mut [Value], idx: usize, path: &str, value: Value) {
    let (parent, key) = path.rsplit_once('/').unwrap();
    let target = rows[idx].pointer_mut(parent).unwrap();
    match target {
        Value::Object(object) => {
            object.insert(key.to_owned(), value);
        }
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        _ => panic!("{path} has no parent container"),
    }
}

fn remove(rows: &mut [Value], idx: usize, path: &str) {
    let (parent, key) = path.rsplit_once('/').unwrap();
    rows[idx]
        .pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(key);
}

type Mutation = fn(&mut Vec<Value>);

/// A mutation that may capture.
type BoxedMutation = Box<dyn Fn(&mut Vec<Value>)>;

// Goal: each native V4 rule (dsh-v4.md 4, 6) refuses with dsh's text, and the base log that
// satisfies all of them is accepted.
// Method: the base log reads cleanly; each case changes one member of it and must fail with
// exactly its text.
#[test]
fn v4_rules_refuse_with_dsh_texts() {
    assert_eq!(check_rows(&base_rows()), Ok(()));
    let cases: Vec<(&str, Mutation, &str)> = vec![
        ("plugin source on a user message", |r| set(r, 3, "/data/source", json!({"kind": "plugin", "plugin": "x"})),
            "format v4 message requires a producer-owned source kind"),
        ("plugin source on the system head", |r| set(r, 2, "/data/message/source", json!({"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt"})),
            "format v4 message requires a producer-owned source kind"),
        ("plugin source in an inbox insert", |r| r.insert(0, json!({"type": "agent/inbox/spliced", "data": {"target": "next-turn", "start": 0,
            "inserted": [{"content": [], "source": {"kind": "plugin", "plugin": "x"}, "role": "user", "id": "i"}]}})),
            "format v4 message requires a producer-owned source kind"),
        ("developer role on a user message", |r| set(r, 3, "/data/role", json!("developer")),
            "format v4 developer/message and developer role must occur together"),
        ("V3 tool-result wrapper", |r| set(r, 7, "/data/message/content", json!([{"type": "tool-result", "toolCallId": "c1", "content": []}])),
            "format v4 tool/result at seq 7 content must not contain a released tool-result wrapper"),
        ("tool-result block in a user message", |r| set(r, 3, "/data/content/0", json!({"type": "tool-result", "toolCallId": "c1", "content": []})),
            "format v4 user/message at seq 3 content must not contain a released tool-result wrapper"),
        ("tool-addition in a user message", |r| set(r, 3, "/data/content/0", json!({"type": "tool-addition", "toolName": "t"})),
            "format v4 tool-addition requires developer role"),
        ("tool-removal in a user message", |r| set(r, 3, "/data/content/0", json!({"type": "tool-removal", "toolName": "t"})),
            "format v4 tool-removal requires developer role"),
        ("tool-change block in a stream", |r| set(r, 5, "/data/stream", json!([{"type": "chunk", "time": 1,
            "chunk": {"type": "block-start", "index": 0, "blockType": "tool-addition"}}])),
            "format v4 tool-change blocks require developer role"),
        ("header.system", |r| set(r, 4, "/data/header/system", json!("x")),
            "format v4 request/header rejects retired header.system"),
        ("deferLoading false", |r| set(r, 4, "/data/header/tools/0/deferLoading", json!(false)),
            "format v4 tool deferLoading must be true when present"),
        ("system role", |r| set(r, 2, "/data/message/role", json!("user")),
            "format v4 system message requires system role"),
        ("system tool-result block", |r| set(r, 2, "/data/message/content", json!([{"type": "tool-result", "toolCallId": "c", "content": []}])),
            "format v4 system content rejects retired tool-result wrappers"),
        ("system image media type", |r| set(r, 2, "/data/message/content", json!([{"type": "image", "attachment": {"attachmentId": "a", "mediaType": "image/bmp"}}])),
            "format v4 system image requires a supported mediaType"),
        ("system/message outside its step", |r| set(r, 2, "/data/step", json!(2)),
            "system/message does not match an open turn and step"),
        ("tool role", |r| set(r, 7, "/data/message/role", json!("user")),
            "format v4 tool/result at seq 7 message requires tool role"),
        ("toolCallId differs from source.callId", |r| set(r, 7, "/data/message/toolCallId", json!("c2")),
            "format v4 tool/result at seq 7 message toolCallId must equal source.callId"),
        ("toolCallId missing", |r| remove(r, 7, "/data/message/toolCallId"),
            "format v4 tool/result at seq 7 message requires a nonempty toolCallId"),
        ("isError not boolean", |r| set(r, 7, "/data/message/isError", json!("no")),
            "format v4 tool/result at seq 7 message isError must be boolean"),
        ("error metadata on a non-error result", |r| set(r, 7, "/data/error", json!({"name": "E", "code": "X"})),
            "format v4 tool/result at seq 7 carries error metadata for a non-error tool result"),
        ("fork result with the wrong seq", |r| {
            r.remove(6);
            set(r, 6, "/data/message/id", json!("forked-tool-result-c1-5"));
            set(r, 6, "/data/message/isError", json!(true));
            set(r, 6, "/data/error", json!({"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}));
        }, "invalid V4 not-started fork result"),
        ("not-started result that is not the repair", |r| { r.remove(6); },
            "tool/result c1 is not the exact TOOL_NOT_STARTED repair"),
        ("developer turn 0", |r| set(r, 8, "/data/turn", json!(0)),
            "developer/message turn must be positive"),
        ("developer role", |r| set(r, 8, "/data/message/role", json!("user")),
            "format v4 developer message requires id, role, content, and a producer-owned source"),
        ("developer plugin source", |r| set(r, 8, "/data/message/source", json!({"kind": "plugin", "plugin": "x"})),
            "format v4 developer message requires id, role, content, and a producer-owned source"),
        ("tool-addition without a name", |r| set(r, 8, "/data/message/content/0/toolName", json!("")),
            "format v4 tool-addition requires a nonempty toolName"),
        ("tool-removal without a name", |r| set(r, 8, "/data/message/content", json!([{"type": "tool-removal"}])),
            "format v4 tool-removal requires a nonempty toolName"),
        ("inline tool definition", |r| set(r, 8, "/data/message/content/0/tool", json!({})),
            "format v4 tool-addition must omit inline tool definitions"),
        ("headerSeq without additions", |r| set(r, 8, "/data/message/content", json!([{"type": "tool-removal", "toolName": "t"}])),
            "format v4 developer/message must omit headerSeq without tool additions"),
        ("headerSeq not a count", |r| set(r, 8, "/data/headerSeq", json!("4")),
            "developer/message headerSeq must be a non-negative safe integer"),
        ("headerSeq not earlier", |r| set(r, 8, "/data/headerSeq", json!(8)),
            "developer/message headerSeq must name an earlier event"),
        ("headerSeq not a header", |r| set(r, 8, "/data/headerSeq", json!(3)),
            "developer/message headerSeq must reference an earlier request/header"),
        ("addition not in the header", |r| set(r, 8, "/data/message/content/0/toolName", json!("u")),
            "developer/message tool-addition \"u\" must name exactly one tool in headerSeq 4"),
        ("addition of an incomplete definition", |r| remove(r, 4, "/data/header/tools/0/description"),
            "developer/message tool-addition \"t\" requires a complete tool definition in headerSeq 4"),
        ("developer outside its step", |r| set(r, 8, "/data/step", json!(2)),
            "developer/message does not match an open turn and step"),
        ("invalid catalog fact", |r| r.push(json!({"type": "subagent/catalog", "data": {"version": 0,
            "childId": "k", "mode": "unknown", "childCreatedAt": 1}})),
            "subagent/catalog requires a supported versioned catalog fact"),
        ("duplicate catalog child", |r| {
            let fact = json!({"type": "subagent/catalog", "data": {"version": 1, "childId": "k",
                "mode": "one-shot", "childCreatedAt": 1}});
            r.push(fact.clone());
            r.push(fact);
        }, "duplicate catalog child k"),
        ("unknown required type", |r| r.insert(0, json!({"type": "x/y", "data": {}})),
            "format v4 contains unknown event type \"x/y\" at seq 0"),
        ("retired dispatch", |r| r.insert(1, json!({"type": "tool/code-dispatch-start", "data": {}})),
            "format v4 rejects retired event type tool/code-dispatch-start"),
        ("developer data not an object", |r| set(r, 8, "/data", json!([1])),
            "format v4 developer/message data must be an object"),
        ("developer without a message", |r| remove(r, 8, "/data/message"),
            "format v4 developer/message requires turn, step, and a developer message"),
        ("developer step not a count", |r| set(r, 8, "/data/step", json!("1")),
            "format v4 developer/message requires turn, step, and a developer message"),
        ("inherited marker in an unseeded session", |r| r.push(json!({"type": "session/end-seed", "data": {"inherited": true}})),
            "format v4 unseeded Session contains an inherited end-seed marker"),
    ];
    for (name, mutate, text) in cases {
        let mut rows = base_rows();
        mutate(&mut rows);
        assert_eq!(check_rows(&rows), Err(text.to_owned()), "{name}");
    }
}

// Goal: the V4 forms the rules must accept: the interrupted and fork not-started repairs, a
// `forked` turn end, `deferLoading: true`, a removal-only developer message without
// `headerSeq`, an ignorable developer message, extra system keys, unknown ignorable events
// and `plugin:` content tags (kept as written).
#[test]
fn v4_rules_accept_the_v4_forms() {
    let not_started = |r: &mut Vec<Value>, id: &str| {
        r.remove(6);
        set(r, 6, "/data/message/id", json!(id));
        set(r, 6, "/data/message/isError", json!(true));
        set(
            r,
            6,
            "/data/message/content",
            json!([{"type": "text", "text":
            "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."}]),
        );
        set(
            r,
            6,
            "/data/error",
            json!({"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}),
        );
    };
    let cases: Vec<(&str, BoxedMutation)> = vec![
        (
            "interrupted repair",
            Box::new(move |r| not_started(r, "interrupted-tool-result-c1-3")),
        ),
        (
            "fork repair",
            Box::new(move |r| not_started(r, "forked-tool-result-c1-6")),
        ),
        (
            "forked turn end",
            Box::new(|r| set(r, 10, "/data/reason", json!({"kind": "forked"}))),
        ),
        (
            "deferLoading",
            Box::new(|r| set(r, 4, "/data/header/tools/0/deferLoading", json!(true))),
        ),
        (
            "removal only",
            Box::new(|r| {
                set(
                    r,
                    8,
                    "/data/message/content",
                    json!([{"type": "tool-removal", "toolName": "t"}]),
                );
                remove(r, 8, "/data/headerSeq");
            }),
        ),
        (
            "ignorable developer",
            Box::new(|r| set(r, 8, "/ignorable", json!(true))),
        ),
        (
            "extra system keys",
            Box::new(|r| set(r, 2, "/data/message/cache", json!(true))),
        ),
        (
            "unknown ignorable event",
            Box::new(|r| {
                r.push(json!({"type": "plugin:x/y", "data": {"a": 1}, "ignorable": true}))
            }),
        ),
        (
            "plugin content tag",
            Box::new(|r| {
                set(
                    r,
                    3,
                    "/data/content/0",
                    json!({"type": "plugin:note", "x": 1}),
                )
            }),
        ),
        (
            "catalog facts",
            Box::new(|r| {
                r.push(
                    json!({"type": "subagent/catalog", "data": {"version": 1, "childId": "k",
                    "mode": "unknown", "childCreatedAt": 1}}),
                );
                r.push(
                    json!({"type": "subagent/catalog", "data": {"version": 2, "childId": "e",
                    "mode": "external", "childCreatedAt": 2}}),
                );
            }),
        ),
        (
            "empty developer message",
            Box::new(|r| {
                set(r, 8, "/data/message/content", json!([]));
                remove(r, 8, "/data/headerSeq");
            }),
        ),
    ];
    for (name, mutate) in cases {
        let mut rows = base_rows();
        mutate(&mut rows);
        assert_eq!(check_rows(&rows), Ok(()), "{name}");
    }
}

// Goal: in a normalized recording a developer message's binding needs only an earlier
// `request/header` (dsh-v4.md 9 item 7); outside one, the same log is refused.
#[test]
fn snapshot_mode_relaxes_the_header_binding() {
    let mut rows = base_rows();
    set(&mut rows, 8, "/data/message/content/0/toolName", json!("u"));
    assert_eq!(check_rows_in(&rows, SnapshotMode::On), Ok(()));
    assert!(check_rows_in(&rows, SnapshotMode::Off).is_err());
    set(&mut rows, 8, "/data/headerSeq", json!(3));
    assert_eq!(
        check_rows_in(&rows, SnapshotMode::On),
        Err("developer/message headerSeq must reference an earlier request/header".to_owned())
    );
}

// Goal: a seeded V4 session's cut is its last inherited end-seed (dsh-v4.md 6, step 4): a
// seeded header with such a marker is accepted (the inherited prefix before it included), one
// without is refused with dsh's text; an uninherited end-seed does not count.
// Method: the base rows under a seeded header, with and without a marker after a prefix.
#[test]
fn a_seeded_v4_session_needs_its_inherited_marker() {
    let header = r#"{"type":"session","version":4,"id":"s","createdAt":1,"parentSession":"p","isSeeded":true,"delegationDepth":1}"#;
    let read = |rows: &[Value]| check_log(header, rows, SnapshotMode::Off);
    let refusal = "format v4 seeded header disagrees with its last inherited end-seed marker";
    assert_eq!(read(&base_rows()), Err(refusal.to_owned()));
    let mut own = base_rows();
    own.push(json!({"type": "session/end-seed", "data": {}}));
    assert_eq!(read(&own), Err(refusal.to_owned()));
    let mut seeded = base_rows();
    seeded.push(json!({"type": "session/end-seed", "data": {"inherited": true}}));
    assert_eq!(read(&seeded), Ok(()));
}
