//! One accepted and one refused log per relationship rule, asserting dsh's exact text
//! (`spec/relations.md`), plus atomic batches and checkpoint round trips.
//!
//! Method: each case is a short log written as JSON rows without `seq`/`time` (the rows are
//! read as a normalized recording, so seqs are row positions), admitted event by event through
//! [`Admission`], the way every entry point admits; the result is the first refusal as
//! `message [rule]`.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::{Extensions, Identity};
use crate::admission::Admission;
use crate::error::Rule;
use crate::event::Event;
use crate::row::{decode_row, Decoded, RowContext};
use crate::rules::RuleContext;
use crate::version::FormatVersion;

const V2: FormatVersion = FormatVersion::V2;
const V3: FormatVersion = FormatVersion::V3;

fn events(version: FormatVersion, rows: &[Value]) -> Vec<Event> {
    let ctx = RowContext {
        version,
        snapshot: true,
        skim: false,
    };
    let mut events = Vec::new();
    for (seq, row) in rows.iter().enumerate() {
        let text = serde_json::to_vec(row).unwrap();
        match decode_row(&text, ctx, seq as u64) {
            Ok(Decoded::One(event)) => events.push(*event),
            other => panic!("row {seq} does not decode: {other:?}"),
        }
    }
    events
}

fn admission(version: FormatVersion, ext: Extensions, identity: Identity) -> Admission {
    let mut admission = Admission::new(RuleContext {
        version,
        snapshot: true,
    });
    admission.set_extensions(ext);
    admission.set_identity(identity);
    admission
}

fn identity(version: FormatVersion) -> Identity {
    Identity {
        id: "s".to_owned(),
        has_parent: false,
        seeded: false,
        version: version.number(),
    }
}

/// Admits `rows`; the first refusal as `seq: message [rule]`, or the end-of-log refusal.
fn run_with(version: FormatVersion, ext: Extensions, id: Identity, rows: &[Value]) -> String {
    let mut admission = admission(version, ext, id);
    for event in events(version, rows) {
        if let Err(v) = admission.admit(&event) {
            return format!("{}: {} [{}]", event.seq, v.message, v.rule);
        }
    }
    match admission.finish() {
        Ok(()) => "ok".to_owned(),
        Err((seq, v)) => format!("end at {seq}: {} [{}]", v.message, v.rule),
    }
}

fn run(version: FormatVersion, rows: &[Value]) -> String {
    run_with(version, Extensions::default(), identity(version), rows)
}

fn turn_start(turn: u64) -> Value {
    json!({"type": "turn/start", "data": {"turn": turn}})
}

fn turn_end(turn: u64) -> Value {
    json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
}

fn step_start(turn: u64, step: u64) -> Value {
    json!({"type": "step/start", "data": {"turn": turn, "step": step}})
}

fn step_end(turn: u64, step: u64) -> Value {
    json!({"type": "step/end", "data": {"turn": turn, "step": step}})
}

fn header(provider: &str) -> Value {
    json!({"type": "request/header", "data": {
        "header": {"config": {"provider": provider, "model": "m"}}, "reason": "initial"}})
}

fn user_message(id: &str, kind: &str) -> Value {
    json!({"type": "user/message", "surfaceOp": "append", "data": {
        "id": id, "role": "user", "content": [{"type": "text", "text": id}],
        "source": {"kind": kind}}})
}

fn system_message(turn: u64, step: u64) -> Value {
    json!({"type": "system/message", "surfaceOp": "append", "data": {"turn": turn, "step": step,
        "message": {"id": "sys", "role": "system", "content": [],
            "source": {"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt"}}}})
}

fn assistant(turn: u64, step: u64, calls: &[(&str, &str)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, args)| json!({"type": "tool-call", "id": id, "name": "bash", "arguments": args}))
        .collect();
    json!({"type": "assistant/message", "surfaceOp": "append", "data": {"turn": turn, "step": step,
        "message": {"id": format!("a{turn}.{step}"), "role": "assistant", "content": content,
            "source": {"kind": "model", "provider": "p", "model": "m"}},
        "stream": []}})
}

fn attempt(turn: u64, step: u64) -> Value {
    json!({"type": "assistant/attempt", "data": {"turn": turn, "step": step, "stream": []}})
}

fn tool_call(turn: u64, step: u64, id: &str, args: &str) -> Value {
    json!({"type": "tool/call", "data": {"turn": turn, "step": step, "callId": id,
        "name": "bash", "arguments": args}})
}

fn result_message(id: &str, call_id: &str, text: &str, is_error: bool) -> Value {
    json!({"id": id, "role": "user", "source": {"kind": "tool", "callId": call_id},
        "content": [{"type": "tool-result", "toolCallId": call_id,
            "content": [{"type": "text", "text": text}], "isError": is_error}]})
}

fn tool_result(turn: u64, step: u64, call_id: &str) -> Value {
    json!({"type": "tool/result", "surfaceOp": "append", "data": {"turn": turn, "step": step,
        "message": result_message(&format!("r-{call_id}"), call_id, "done", false)}})
}

fn not_started(turn: u64, step: u64, call_id: &str, id: &str) -> Value {
    json!({"type": "tool/result", "surfaceOp": "append", "data": {"turn": turn, "step": step,
        "message": result_message(id, call_id, super::rules::NOT_STARTED_TEXT, true),
        "error": {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}}})
}

fn other(kind: &str, data: Value) -> Value {
    json!({"type": kind, "data": data})
}

fn retry(retry_id: &str, turn: u64, step: u64, policy: &str, retry: u64) -> Value {
    other(
        "llm/retry",
        json!({"retryId": retry_id, "turn": turn, "step": step, "provider": "p",
            "mode": "normal", "policyKey": policy, "retry": retry, "delayMs": 1,
            "failure": {"code": "EMPTY_RESPONSE"}}),
    )
}

fn retry_started(retry_id: &str, turn: u64, step: u64, retry: u64) -> Value {
    other(
        "llm/retry-started",
        json!({"retryId": retry_id, "turn": turn, "step": step, "retry": retry}),
    )
}

/// A turn and step open, with a header: seqs 0 to 2.
fn opening() -> Vec<Value> {
    vec![turn_start(1), step_start(1, 1), header("p")]
}

fn with(prefix: Vec<Value>, rest: &[Value]) -> Vec<Value> {
    let mut rows = prefix;
    rows.extend_from_slice(rest);
    rows
}

fn ok(rows: &[Value]) {
    assert_eq!(run(V2, rows), "ok");
}

fn refused(rows: &[Value], expected: &str) {
    assert_eq!(run(V2, rows), expected);
}

// Goal: turn numbering (spec 12.2 turns 1, 2). Method: consecutive turns pass; a skipped
// number, a start inside a turn, an end of another turn and an end inside a step refuse.
#[test]
fn turns() {
    ok(&[turn_start(1), turn_end(1), turn_start(2), turn_end(2)]);
    refused(
        &[turn_start(1), turn_end(1), turn_start(3)],
        "2: turn/start 3 does not open expected turn 2 [turn-start]",
    );
    refused(
        &[turn_start(1), turn_start(2)],
        "1: turn/start 2 does not open expected turn 1 [turn-start]",
    );
    refused(
        &[turn_start(1), turn_end(2)],
        "1: turn/end 2 has no matching open turn [turn-end-unmatched]",
    );
    refused(
        &[turn_start(1), step_start(1, 1), turn_end(1)],
        "2: turn/end 1 crosses an open step [turn-end-open-step]",
    );
}

// Goal: step numbering (spec 12.2 turns 3, 4).
#[test]
fn steps() {
    ok(&[
        turn_start(1),
        step_start(1, 1),
        step_end(1, 1),
        step_start(1, 2),
        step_end(1, 2),
        turn_end(1),
        turn_start(2),
        step_start(2, 1),
    ]);
    refused(
        &[turn_start(1), step_start(1, 2)],
        "1: step/start does not match the open turn and next step [step-start]",
    );
    refused(
        &[turn_start(1), step_start(1, 1), step_start(1, 2)],
        "2: step/start does not match the open turn and next step [step-start]",
    );
    refused(
        &[turn_start(1), step_end(1, 1)],
        "1: step/end does not match an open turn and step [open-step]",
    );
}

// Goal: step events outside the open step (spec 12.2 turns 6; the V2 extension
// `assistant/attempt`; V3 `system/message`).
#[test]
fn step_events() {
    ok(&with(opening(), &[attempt(1, 1), assistant(1, 1, &[])]));
    refused(
        &with(opening(), &[assistant(1, 2, &[])]),
        "3: assistant/message does not match an open turn and step [open-step]",
    );
    refused(
        &[turn_start(1), attempt(1, 1)],
        "1: assistant/attempt does not match an open turn and step [open-step]",
    );
    assert_eq!(
        run(V3, &[turn_start(1), step_start(1, 1), system_message(1, 1)]),
        "ok"
    );
    assert_eq!(
        run(V3, &[turn_start(1), system_message(1, 1)]),
        "1: system/message does not match an open step [system-step]"
    );
}

// Goal: request events need an open turn (spec 12.2 other 1).
#[test]
fn request_events() {
    ok(&opening());
    refused(
        &[header("p")],
        "0: request/header is outside an open turn [open-turn]",
    );
    refused(
        &[other(
            "request/context",
            json!({"provider": "p", "model": "m"}),
        )],
        "0: request/context is outside an open turn [open-turn]",
    );
}

// Goal: tool lifecycles (spec 12.2 tool lifecycle 1 to 4), each text.
#[test]
fn tool_lifecycles() {
    let advertised = with(opening(), &[assistant(1, 1, &[("c1", "{}"), ("c2", "{}")])]);
    ok(&with(
        advertised.clone(),
        &[
            tool_call(1, 1, "c1", "{}"),
            tool_result(1, 1, "c1"),
            tool_call(1, 1, "c2", "{}"),
            tool_result(1, 1, "c2"),
            step_end(1, 1),
            turn_end(1),
        ],
    ));
    refused(
        &with(opening(), &[assistant(1, 1, &[("c1", "{}"), ("c1", "{}")])]),
        "3: assistant/message repeats advertised tool call c1 [tool-call-repeated]",
    );
    refused(
        &with(advertised.clone(), &[tool_call(1, 1, "c1", "{\"x\":1}")]),
        "4: tool/call c1 does not match one advertised tool call [tool-call-unmatched]",
    );
    refused(
        &with(advertised.clone(), &[tool_result(1, 1, "c9")]),
        "4: tool/result c9 has no advertised tool lifecycle [tool-result-unmatched]",
    );
    refused(
        &with(advertised.clone(), &[tool_result(1, 1, "c1")]),
        "4: tool/result c1 is not the exact TOOL_NOT_STARTED repair [tool-result-not-started]",
    );
    refused(
        &with(advertised.clone(), &[step_end(1, 1)]),
        "4: step/end leaves unresolved tool call c1 [unresolved-tool-call]",
    );
    // The first unresolved call in advertisement order is named.
    refused(
        &with(
            advertised,
            &[
                tool_call(1, 1, "c1", "{}"),
                tool_result(1, 1, "c1"),
                step_end(1, 1),
            ],
        ),
        "6: step/end leaves unresolved tool call c2 [unresolved-tool-call]",
    );
}

// Goal: the exact TOOL_NOT_STARTED repair settles a call that never started; in V3 its id
// may carry any historical seq suffix, in V2 it must be the current seq.
#[test]
fn not_started_repair() {
    let prefix = with(opening(), &[assistant(1, 1, &[("c1", "{}")])]);
    ok(&with(
        prefix.clone(),
        &[
            not_started(1, 1, "c1", "interrupted-tool-result-c1-4"),
            step_end(1, 1),
        ],
    ));
    refused(
        &with(
            prefix.clone(),
            &[not_started(1, 1, "c1", "interrupted-tool-result-c1-7")],
        ),
        "4: tool/result c1 is not the exact TOOL_NOT_STARTED repair [tool-result-not-started]",
    );
    let v3 = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &[("c1", "{}")]),
        not_started(1, 1, "c1", "interrupted-tool-result-c1-7"),
        step_end(1, 1),
    ];
    assert_eq!(run(V3, &v3), "ok");
    let mut leading_zero = v3.clone();
    leading_zero[3] = not_started(1, 1, "c1", "interrupted-tool-result-c1-07");
    assert_eq!(
        run(V3, &leading_zero),
        "3: tool/result c1 is not the exact TOOL_NOT_STARTED repair [tool-result-not-started]"
    );
}

// Goal: a tool/result replace (content rewrite) only needs an open turn.
#[test]
fn tool_result_replace() {
    let rewrite = json!({"type": "tool/result",
        "surfaceOp": {"op": "replace", "start": 5, "end": 5}, "sourceEventSeqs": [5],
        "data": {"turn": 1, "step": 1, "message": result_message("r-c1", "c1", "short", false)}});
    let done = with(
        opening(),
        &[
            assistant(1, 1, &[("c1", "{}")]),
            tool_call(1, 1, "c1", "{}"),
            tool_result(1, 1, "c1"),
            step_end(1, 1),
        ],
    );
    ok(&with(done.clone(), std::slice::from_ref(&rewrite)));
    refused(
        &with(done, &[turn_end(1), rewrite]),
        "8: tool/result replacement is outside an open turn [tool-result-replace-outside-turn]",
    );
}

// Goal: retry chains (spec 12.2 other 2, 3), each text.
#[test]
fn retries() {
    ok(&with(
        opening(),
        &[
            retry("r1", 1, 1, "k", 1),
            retry_started("r1", 1, 1, 1),
            retry("r1", 1, 1, "k", 2),
            retry_started("r1", 1, 1, 2),
            retry("r2", 1, 1, "other", 1),
            step_end(1, 1),
            // The last closed step is still current for a retry.
            retry("r1", 1, 1, "k", 3),
        ],
    ));
    refused(
        &with(opening(), &[retry("r1", 1, 2, "k", 1)]),
        "3: llm/retry does not match the current turn and step [retry-step]",
    );
    let mut foreign = retry("r1", 1, 1, "k", 1);
    foreign["data"]["provider"] = json!("q");
    refused(
        &with(opening(), &[foreign]),
        "3: llm/retry provider does not match the open request/header [retry-provider]",
    );
    refused(
        &with(opening(), &[retry("r1", 1, 1, "k", 2)]),
        "3: llm/retry must use retry 1 [retry-number]",
    );
    refused(
        &with(
            opening(),
            &[retry("r1", 1, 1, "k", 1), retry("r2", 1, 1, "k", 2)],
        ),
        "4: llm/retry must preserve retryId across one policy chain [retry-id-changed]",
    );
    refused(
        &with(
            opening(),
            &[retry("r1", 1, 1, "k", 1), retry("r1", 1, 1, "other", 1)],
        ),
        "4: llm/retry reuses retryId \"r1\" across policy chains [retry-id-reused]",
    );
    refused(
        &with(opening(), &[retry_started("r1", 1, 1, 1)]),
        "3: llm/retry-started pairs no prior scheduled attempt [retry-started-unpaired]",
    );
    refused(
        &with(
            opening(),
            &[retry("r1", 1, 1, "k", 1), retry_started("r1", 1, 2, 1)],
        ),
        "4: llm/retry-started does not match its scheduled turn and step [retry-started-step]",
    );
    refused(
        &with(
            opening(),
            &[
                retry("r1", 1, 1, "k", 1),
                retry_started("r1", 1, 1, 1),
                retry_started("r1", 1, 1, 1),
            ],
        ),
        "5: llm/retry-started repeats one scheduled attempt [retry-started-repeated]",
    );
}

fn title(seqs: Value, kind: &str) -> Value {
    other(
        "session/title",
        json!({"title": "t", "messageSeqs": seqs, "source": {"kind": kind}}),
    )
}

fn title_request(seqs: Value, plugin: &str) -> Value {
    other(
        "session/title-llm-request",
        json!({"titleProvider": "p", "messageSeqs": seqs, "route": {}, "system": "s",
            "maxTokens": 16, "messages": [{"id": "t", "role": "user",
                "content": [{"type": "text", "text": "anything"}],
                "source": {"kind": "plugin", "plugin": plugin}}]}),
    )
}

// Goal: title sources (spec 12.2 other 4), each text.
#[test]
fn titles() {
    let users = vec![
        user_message("u", "user"),
        user_message("n", "agent-instructions"),
    ];
    ok(&with(
        users.clone(),
        &[
            title(json!([0]), "fallback"),
            title(json!([]), "user"),
            title_request(json!([0]), "dsh-session-title-llm"),
        ],
    ));
    refused(
        &with(users.clone(), &[title(json!([]), "fallback")]),
        "2: session/title 2 messageSeqs must be empty exactly for a user title [title-user-seqs]",
    );
    refused(
        &with(users.clone(), &[title(json!([1]), "fallback")]),
        "2: session/title 2 messageSeqs must cite earlier human user/message events \
         [title-sources]",
    );
    refused(
        &with(users.clone(), &[title(json!([2]), "fallback")]),
        "2: session/title 2 messageSeqs must cite earlier human user/message events \
         [title-sources]",
    );
    refused(
        &with(users, &[title_request(json!([0]), "other")]),
        "2: session/title-llm-request messages do not represent messageSeqs \
         [title-request-messages]",
    );
}

fn command_run(id: &str) -> Value {
    other(
        "command/run",
        json!({"commandId": id, "name": "compact", "source": {"kind": "user"}}),
    )
}

fn command_done(id: &str, kind: &str, source: Option<u64>) -> Value {
    let mut data = json!({"commandId": id, "kind": kind});
    if let Some(seq) = source {
        data["sourceEventSeq"] = json!(seq);
    }
    other("command/done", data)
}

// Goal: commands (spec 12.2 other 5), each text, including a source named ahead.
#[test]
fn commands() {
    ok(&[
        user_message("u", "user"),
        command_run("c1"),
        command_done("c1", "success", Some(0)),
        command_done("c1", "success", Some(4)),
        user_message("v", "user"),
    ]);
    refused(
        &[command_run("c1"), command_run("c1")],
        "1: command/run repeats commandId c1 [command-repeated]",
    );
    refused(
        &[command_done("c1", "success", None)],
        "0: command/done c1 has no prior command/run [command-done-unmatched]",
    );
    refused(
        &[command_run("c1"), command_done("c1", "success", Some(0))],
        "1: command/done c1 has invalid sourceEventSeq [command-source-seq]",
    );
    refused(
        &[
            user_message("u", "user"),
            command_run("c1"),
            command_done("c1", "error", Some(0)),
        ],
        "2: command/done c1 has invalid sourceEventSeq [command-source-seq]",
    );
    refused(
        &[
            command_run("c1"),
            command_done("c1", "success", Some(2)),
            command_run("c2"),
        ],
        "2: command/done c1 has invalid sourceEventSeq [command-source-seq]",
    );
}

fn dispatch(kind: &str, root: &str, parent: &str, sub: &str, args: Value) -> Value {
    let mut data = json!({"rootCallId": root, "parentCallId": parent, "subCallId": sub,
        "name": "read", "arguments": args});
    if !kind.ends_with("-start") {
        data["isError"] = json!(false);
        data["content"] = json!([]);
    }
    other(kind, data)
}

// Goal: PTC dispatch chains (spec 12.2 other 1): V2 names the events tool/code-dispatch*,
// V3 tool/ptc-dispatch*, and the texts name the event's own type.
#[test]
fn ptc_dispatch() {
    let start = "tool/code-dispatch-start";
    let settle = "tool/code-dispatch";
    ok(&with(
        opening(),
        &[
            dispatch(start, "r", "r", "a", json!({"p": 1})),
            dispatch(start, "r", "a", "b", json!(null)),
            dispatch(settle, "r", "a", "b", json!(null)),
            dispatch(settle, "r", "r", "a", json!({"p": 1})),
        ],
    ));
    refused(
        &[dispatch(start, "r", "r", "a", json!(1))],
        "0: tool/code-dispatch-start is outside an open turn [open-turn]",
    );
    refused(
        &with(
            opening(),
            &[
                dispatch(start, "r", "r", "a", json!(1)),
                dispatch(settle, "q", "q", "a", json!(1)),
            ],
        ),
        "4: tool/code-dispatch changes its rootCallId [ptc-root-changed]",
    );
    refused(
        &with(opening(), &[dispatch(start, "r", "x", "a", json!(1))]),
        "3: tool/code-dispatch-start parentCallId does not belong to rootCallId [ptc-parent]",
    );
    refused(
        &with(
            opening(),
            &[
                dispatch(start, "r", "r", "a", json!(1)),
                dispatch(start, "r", "r", "a", json!(1)),
            ],
        ),
        "4: tool/code-dispatch-start repeats subCallId [ptc-start-repeated]",
    );
    refused(
        &with(opening(), &[dispatch(settle, "r", "r", "a", json!(1))]),
        "3: tool/code-dispatch has no unique start [ptc-settle-unmatched]",
    );
    refused(
        &with(
            opening(),
            &[
                dispatch(start, "r", "r", "a", json!(1)),
                dispatch(settle, "r", "r", "a", json!(2)),
            ],
        ),
        "4: tool/code-dispatch does not match its start [ptc-settle-mismatch]",
    );
    let v3 = [
        turn_start(1),
        dispatch("tool/ptc-dispatch-start", "r", "r", "a", json!(1)),
        dispatch("tool/ptc-dispatch", "r", "r", "a", json!(1)),
        dispatch("tool/ptc-dispatch", "r", "r", "a", json!(1)),
    ];
    assert_eq!(
        run(V3, &v3),
        "3: tool/ptc-dispatch has no unique start [ptc-settle-unmatched]"
    );
}

fn delivery(session: &str, version: u64) -> Value {
    other(
        "session-log-deepseek/delivery-accepted",
        json!({"sessionId": session, "throughSeq": 0, "sessionFormatVersion": version}),
    )
}

fn end_seed(inherited: bool) -> Value {
    if inherited {
        other("session/end-seed", json!({"inherited": true}))
    } else {
        other("session/end-seed", json!({}))
    }
}

// Goal: delivery markers (spec 12.2 other 6): a current-generation marker names this
// session, except inside the inherited prefix of a forked session; an older generation's
// marker is not checked.
#[test]
fn delivery_markers() {
    ok(&[delivery("s", 2), delivery("parent", 0)]);
    refused(
        &[delivery("parent", 2)],
        "0: current-generation delivery marker names the wrong Session [delivery-session]",
    );
    let fork = Identity {
        id: "s".to_owned(),
        has_parent: true,
        seeded: true,
        version: 2,
    };
    let ext = Extensions::default();
    assert_eq!(
        run_with(
            V2,
            ext,
            fork.clone(),
            &[delivery("parent", 2), end_seed(true)]
        ),
        "ok"
    );
    assert_eq!(
        run_with(V2, ext, fork, &[end_seed(true), delivery("parent", 2)]),
        "end at 1: current-generation delivery marker names the wrong Session \
         [delivery-session]"
    );
}

fn compaction_start(id: &str, turn: Value) -> Value {
    other(
        "compaction/start",
        json!({"compactionId": id, "turn": turn}),
    )
}

fn summary(id: &str, start: u64, end: u64, seqs: Value) -> Value {
    other(
        "compaction/summary",
        json!({"compactionId": id, "summary": [{"type": "text", "text": "s"}],
            "shadowedRange": {"start": start, "end": end}, "shadowedSeqs": seqs,
            "shadowedTokenCount": 1, "provider": "p", "model": "m"}),
    )
}

fn checkpoint_message(id: &str, start: u64, end: u64, sources: Value) -> Value {
    json!({"type": "user/message", "surfaceOp": {"op": "replace", "start": start, "end": end},
        "sourceEventSeqs": sources, "data": {"id": "cp", "role": "user",
            "content": [{"type": "text", "text": "summary"}],
            "source": {"kind": "plugin", "plugin": "compact", "compactionId": id}}})
}

fn compaction_end(id: &str, turn: Value) -> Value {
    other("compaction/end", json!({"compactionId": id, "turn": turn}))
}

fn failed_end(id: &str, turn: Value) -> Value {
    other(
        "compaction/end",
        json!({"compactionId": id, "turn": turn, "error": {"message": "x"}}),
    )
}

/// Two user messages (seqs 0, 1), then a standalone compaction of both.
fn standalone_compaction() -> Vec<Value> {
    vec![
        user_message("u1", "user"),
        user_message("u2", "user"),
        compaction_start("k", json!(null)),
        summary("k", 0, 1, json!([0, 1])),
        checkpoint_message("k", 0, 1, json!([0, 1, 2, 3])),
        compaction_end("k", json!(null)),
    ]
}

// Goal: compaction transactions (spec 12.2 compaction 1 to 7), each text.
#[test]
fn compactions() {
    ok(&standalone_compaction());
    ok(&[
        turn_start(1),
        compaction_start("k", json!(1)),
        failed_end("k", json!(1)),
    ]);
    let mut rows = standalone_compaction();
    rows.truncate(3);
    refused(
        &with(rows.clone(), &[compaction_start("j", json!(null))]),
        "3: compaction/start overlaps an open compaction [compaction-overlap]",
    );
    refused(
        &[compaction_start("k", json!(1))],
        "0: compaction/start does not match the open turn [compaction-turn]",
    );
    refused(
        &[turn_start(1), compaction_start("k", json!(null))],
        "1: compaction/start does not match the open turn [compaction-turn]",
    );
    refused(
        &with(rows.clone(), &[summary("j", 0, 1, json!([0, 1]))]),
        "3: compaction/summary has no matching compaction/start [compaction-unmatched]",
    );
    refused(
        &with(
            rows.clone(),
            &[
                summary("k", 0, 1, json!([0, 1])),
                summary("k", 0, 1, json!([0, 1])),
            ],
        ),
        "4: compaction/summary repeats [compaction-summary-repeated]",
    );
    refused(
        &with(rows.clone(), &[summary("k", 0, 1, json!([0]))]),
        "3: compaction/summary shadowedSeqs do not name an exact current surface span \
         [compaction-span]",
    );
    refused(
        &[
            user_message("u1", "user"),
            other(
                "compaction/prune",
                json!({"shadowedRange": {"start": 0, "end": 0}, "shadowedSeqs": [],
                    "shadowedTokenCount": 0}),
            ),
        ],
        "1: compaction/prune shadowedSeqs do not name an exact current surface span \
         [compaction-span]",
    );
    refused(
        &with(rows.clone(), &[compaction_end("k", json!(1))]),
        "3: compaction/end changes its owner turn [compaction-owner-changed]",
    );
    refused(
        &with(rows.clone(), &[compaction_end("k", json!(null))]),
        "3: successful compaction/end requires one summary [compaction-summary-missing]",
    );
    refused(
        &[
            user_message("u1", "user"),
            checkpoint_message("k", 0, 0, json!([0])),
        ],
        "1: compaction checkpoint at seq 1 has no matching compaction/start \
         [compaction-unmatched]",
    );
}

// Goal: turn boundaries inside an open compaction (spec 12.2 compaction 3, 7): refused unless
// a later session/end-seed proves the start stale; a compaction/end, or the end of the log,
// proves it is not.
#[test]
fn compaction_crossings() {
    let crossed = [turn_start(1), compaction_start("k", json!(1)), turn_end(1)];
    ok(&with(crossed.to_vec(), &[end_seed(false), turn_start(2)]));
    refused(
        &crossed,
        "end at 2: turn/end crosses an open compaction [compaction-crossing]",
    );
    refused(
        &with(crossed.to_vec(), &[failed_end("k", json!(1))]),
        "3: turn/end crosses an open compaction [compaction-crossing]",
    );
}

// Goal: the legacy restart exception (spec 12.2 turns 5) holds only behind its extension
// flag, and only right after a non-empty next-turn splice.
#[test]
fn legacy_restart() {
    let splice = other(
        "agent/inbox/spliced",
        json!({"target": "next-turn", "start": 0,
            "inserted": [{"id": "i", "role": "user", "content": [], "source": {"kind": "user"}}]}),
    );
    let rows = [turn_start(1), splice.clone(), turn_start(2), turn_end(2)];
    let legacy = Extensions {
        legacy_interrupted_turn_restart: true,
    };
    assert_eq!(run_with(V2, legacy, identity(V2), &rows), "ok");
    assert_eq!(
        run(V2, &rows),
        "2: turn/start 2 does not open expected turn 1 [turn-start]"
    );
    let late = [turn_start(1), splice, header("p"), turn_start(2)];
    assert_eq!(
        run_with(V2, legacy, identity(V2), &late),
        "3: turn/start 2 does not open expected turn 1 [turn-start]"
    );
}

// Goal: V0 and V1 logs are not validated here (their V1 -> V2 edge validates the transformed
// artifact).
#[test]
fn older_versions_are_not_validated() {
    let mut admission = Admission::new(RuleContext {
        version: FormatVersion::V1,
        snapshot: true,
    });
    let rows = [turn_start(1), turn_start(5)];
    for event in events(FormatVersion::V1, &rows) {
        admission.admit(&event).unwrap();
    }
    assert!(!admission.relations().enabled());
}

// Goal: a batch refused part-way leaves the relationship state exactly as before (atomic
// batches through undo records). Method: admit a prefix, then a batch that touches every
// collection and ends with a refused event; compare the state with a fresh fold of the prefix.
#[test]
fn refused_batch_restores_the_state() {
    let prefix = with(
        opening(),
        &[
            user_message("u", "user"),
            command_run("c0"),
            retry("r0", 1, 1, "k", 1),
        ],
    );
    let batch = [
        assistant(1, 1, &[("c1", "{}"), ("c2", "{}")]),
        tool_call(1, 1, "c1", "{}"),
        tool_result(1, 1, "c1"),
        not_started(1, 1, "c2", "interrupted-tool-result-c2-9"),
        retry("r0", 1, 1, "k", 2),
        retry_started("r0", 1, 1, 2),
        retry("r9", 1, 1, "k9", 1),
        retry_started("r9", 1, 1, 1),
        command_run("c1"),
        command_done("c1", "success", Some(40)),
        user_message("v", "user"),
        dispatch("tool/code-dispatch-start", "r", "r", "a", json!(1)),
        dispatch("tool/code-dispatch", "r", "r", "a", json!(1)),
        compaction_start("k", json!(1)),
        step_end(1, 1),
        turn_end(1),
        end_seed(false),
        turn_start(7),
    ];
    let all = events(V2, &with(prefix.clone(), &batch));
    let (head, tail) = all.split_at(prefix.len());
    let mut admission = admission(V2, Extensions::default(), identity(V2));
    for event in head {
        admission.admit(event).unwrap();
    }
    let before = admission.relations().checkpoint();
    let state = admission.relations().clone();
    // The turn/end drops the live chain; the undo brings it back.
    assert_eq!(before.chains.len(), 1);
    let (idx, _) = admission.admit_batch(tail).unwrap_err();
    assert_eq!(idx, batch.len() - 1);
    assert_eq!(admission.relations().checkpoint(), before);
    // The in-memory sets too (a checkpoint holds their journal, not the sets).
    assert!(*admission.relations() == state);
    // The batch without its last event is admitted, and resumes from its checkpoint.
    admission.admit_batch(&tail[..tail.len() - 1]).unwrap();
    let cp = admission.relations().checkpoint();
    let ctx = RuleContext {
        version: V2,
        snapshot: true,
    };
    let resumed = super::Relations::from_checkpoint(ctx, cp.clone(), all.len() as u64 - 1).unwrap();
    assert_eq!(resumed.checkpoint(), cp);
    assert_eq!(Rule::TurnStart.name(), "turn-start");
}

// Goal: the validator keeps only the retry chains a later retry can extend (the open turn's
// current step), so its state and checkpoints do not grow with the log, and the rules decide
// as before. Method: retries in two steps and two turns; the chains after each step, the
// retry rules across the boundaries, and an older build's checkpoint (every chain kept)
// resuming to the same state.
#[test]
fn retry_chains_end_with_their_step() {
    let ctx = RuleContext {
        version: V2,
        snapshot: true,
    };
    let rows = with(
        opening(),
        &[
            retry("r1", 1, 1, "k", 1),
            retry("r2", 1, 1, "other", 1),
            step_end(1, 1),
            // The closed step is still current: its chains live on.
            retry("r1", 1, 1, "k", 2),
            step_start(1, 2),
            retry("r3", 1, 2, "k", 1),
            step_end(1, 2),
            turn_end(1),
        ],
    );
    let all = events(V2, &rows);
    let mut walked = admission(V2, Extensions::default(), identity(V2));
    let mut chains = Vec::new();
    for event in &all {
        walked.admit(event).unwrap();
        let cp = walked.relations().checkpoint();
        chains.push(
            cp.chains
                .iter()
                .map(|c| (c.retry_id.clone(), c.last_retry))
                .collect::<Vec<_>>(),
        );
    }
    let ids = |ids: &[(&str, u64)]| {
        ids.iter()
            .map(|(id, n)| (id.to_string(), *n))
            .collect::<Vec<_>>()
    };
    assert_eq!(chains[4], ids(&[("r1", 1), ("r2", 1)]));
    assert_eq!(chains[6], ids(&[("r1", 2), ("r2", 1)]));
    assert_eq!(chains[7], ids(&[]), "step/start 2 ends step 1's chains");
    assert_eq!(chains[8], ids(&[("r3", 1)]));
    assert_eq!(chains[10], ids(&[]), "turn/end ends every chain");
    // Retry ids and scheduled attempts reach across the whole log.
    let cp = walked.relations().checkpoint();
    let scheduled: Vec<(&str, u64)> = super::facts::Facts::new(cp.facts.bytes().unwrap())
        .filter_map(|fact| match fact.unwrap() {
            super::facts::Fact::Retry {
                retry_id, retry, ..
            } => Some((retry_id, retry)),
            _ => None,
        })
        .collect();
    assert_eq!(scheduled, [("r1", 1), ("r2", 1), ("r1", 2), ("r3", 1)]);
    let next = [
        turn_start(2),
        step_start(2, 1),
        header("p"),
        retry("r1", 2, 1, "k", 1),
    ];
    assert_eq!(
        run(V2, &with(rows.clone(), &next)),
        "14: llm/retry reuses retryId \"r1\" across policy chains [retry-id-reused]"
    );
    assert_eq!(
        run(V2, &with(rows.clone(), &[retry_started("r3", 1, 2, 1)])),
        "ok"
    );
    assert_eq!(
        run(V2, &with(rows.clone(), &[retry_started("r3", 1, 1, 1)])),
        "11: llm/retry-started does not match its scheduled turn and step [retry-started-step]"
    );
    // An older build's checkpoint at seq 8 (after step/start 2) still held step 1's chains.
    let mut prefix = admission(V2, Extensions::default(), identity(V2));
    for event in &all[..8] {
        prefix.admit(event).unwrap();
    }
    let mut old = prefix.relations().checkpoint();
    assert!(old.chains.is_empty());
    let chain = |id: &str, policy: &str, last: u64| super::checkpoint::ChainCheckpoint {
        turn: 1,
        step: 1,
        provider: Some("p".to_owned()),
        policy_key: Some(policy.to_owned()),
        last_retry: last,
        retry_id: id.to_owned(),
    };
    old.chains = vec![chain("r1", "k", 2), chain("r2", "other", 1)];
    let resumed = super::Relations::from_checkpoint(ctx, old.clone(), 8).unwrap();
    assert_eq!(resumed.checkpoint(), prefix.relations().checkpoint());
    old.prune_chains();
    assert_eq!(old, prefix.relations().checkpoint());
}

// Goal: a resume replays the fact journal into the validator's sets and refuses a journal
// that could not have been written: each damaged journal is an error naming what is wrong,
// never a panic, and the undamaged one resumes to the same state.
// Method: walk a log with retries, a start, commands and a human user message; resume from
// its checkpoint; then resume from checkpoints whose journal is edited fact by fact.
#[test]
fn a_resume_refuses_a_journal_that_could_not_have_been_written() {
    use super::facts::{push, Fact};
    let ctx = RuleContext {
        version: V2,
        snapshot: true,
    };
    let rows = with(
        opening(),
        &[
            retry("r1", 1, 1, "k", 1),
            retry_started("r1", 1, 1, 1),
            command_run("c1"),
            command_done("c1", "success", None),
            user_message("u", "user"),
        ],
    );
    let all = events(V2, &rows);
    let mut walked = admission(V2, Extensions::default(), identity(V2));
    for event in &all {
        walked.admit(event).unwrap();
    }
    let next_seq = all.len() as u64;
    let cp = walked.relations().checkpoint();
    let resumed = super::Relations::from_checkpoint(ctx, cp.clone(), next_seq).unwrap();
    assert_eq!(resumed.checkpoint(), cp);
    let with_facts = |facts: &[Fact<'_>]| {
        let mut edited = cp.clone();
        let mut journal = Vec::new();
        for fact in facts {
            push(&mut journal, fact);
        }
        edited.facts = super::FactJournal::Bytes(journal);
        super::Relations::from_checkpoint(ctx, edited, next_seq).map(|_| ())
    };
    let scheduled = Fact::Retry {
        retry_id: "r1",
        retry: 1,
        turn: 1,
        step: 1,
    };
    let refused = [
        // The live chain's last attempt must be in the journal.
        (vec![], "a retry chain's last attempt is not scheduled"),
        (
            vec![Fact::Retry {
                retry_id: "r1",
                retry: 2,
                turn: 1,
                step: 1,
            }],
            "scheduled retry 2 of \"r1\" is not of one recorded chain",
        ),
        (
            vec![scheduled.clone(), scheduled.clone()],
            "scheduled retry 1 of \"r1\" is not of one recorded chain",
        ),
        (
            vec![Fact::RetryStarted {
                retry_id: "r1",
                retry: 1,
            }],
            "retry start 1 of \"r1\" pairs no unstarted attempt",
        ),
        // The live chain ends at retry 1, so its id can have no later attempt: the next
        // `llm/retry` of the chain would take retry 2 again.
        (
            vec![
                scheduled.clone(),
                Fact::Retry {
                    retry_id: "r1",
                    retry: 2,
                    turn: 1,
                    step: 1,
                },
            ],
            "a retry chain's last attempt is not scheduled",
        ),
        // A later attempt keeps its chain's turn and step.
        (
            vec![
                scheduled.clone(),
                Fact::Retry {
                    retry_id: "r1",
                    retry: 2,
                    turn: 1,
                    step: 2,
                },
            ],
            "scheduled retry 2 of \"r1\" is not of one recorded chain",
        ),
        (
            vec![Fact::HumanUser { seq: next_seq }],
            &format!("human user message {next_seq} is out of order"),
        ),
        (
            vec![Fact::CommandDone { seq: 5 }, Fact::CommandDone { seq: 5 }],
            "command done 5 is out of order",
        ),
        (
            vec![
                Fact::CommandRun {
                    seq: 3,
                    command_id: "c",
                },
                Fact::CommandRun {
                    seq: 4,
                    command_id: "c",
                },
            ],
            "command run 4 is out of order or repeated",
        ),
        (
            vec![Fact::Header {
                seq: 1,
                tools: None,
            }],
            "request header 1 in a log before V4",
        ),
    ];
    for (facts, expected) in refused {
        assert_eq!(with_facts(&facts), Err(expected.to_string()), "{facts:?}");
    }
    let mut truncated = cp.clone();
    let mut journal = cp.facts.bytes().unwrap().to_vec();
    journal.pop();
    truncated.facts = super::FactJournal::Bytes(journal);
    let error = super::Relations::from_checkpoint(ctx, truncated, next_seq).unwrap_err();
    assert!(error.starts_with("fact at journal offset"), "{error}");
}
