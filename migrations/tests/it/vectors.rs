//! The inline vectors of spec 19 item 13 and the system-head cases of spec 10.3.

use pretty_assertions::assert_eq;
use serde_json::json;
use sessionlog_format::{EventData, SurfaceOp};
use sessionlog_migrations::{system_message_id, Reason};

use crate::support::*;

// Goal: the first step gets an empty, appended head right after its step/start.
// Method: a one-step log without a header; compare the whole synthetic row.
#[test]
fn empty_head_after_first_step() {
    let log = vec![
        TURN_START.to_owned(),
        r#"{"type":"step/start","time":7,"data":{"turn":1,"step":1}}"#.to_owned(),
        user("u1", "hi"),
        STEP_END.to_owned(),
        TURN_END.to_owned(),
    ];
    let migrated = migrate(HEADER, &log).expect("migrates");
    let expected_kinds = [
        "turn/start",
        "step/start",
        "system/message",
        "user/message",
        "step/end",
        "turn/end",
    ];
    assert_eq!(kinds(&migrated.events), expected_kinds);
    let id = system_message_id("s1", 1, "step/start");
    let head = json!({"type":"system/message","seq":2,"time":7,"data":{"turn":1,"step":1,
        "message":{"id":id,"role":"system","source":{"kind":"plugin",
        "plugin":"@deepseek-ai/dsh-system-prompt"},"content":[]}},"surfaceOp":"append"});
    assert_eq!(v3_row(&migrated.events[2]), head);
    assert_eq!(migrated.events[3].seq, 3);
    assert_eq!(migrated.requests_proved, 0);
    assert_eq!(migrated.cut, 0);
}

/// The prompt sequence of the upstream vector: first, first, changed, absent, "".
fn prompt_sequence() -> Vec<String> {
    let prompts = [
        Some(r#""first""#),
        Some(r#""first""#),
        Some(r#""second""#),
        None,
        Some(r#""""#),
    ];
    let mut log = vec![TURN_START.to_owned()];
    for (idx, prompt) in prompts.into_iter().enumerate() {
        let step = idx as u64 + 1;
        log.push(step_start(step));
        if step == 1 {
            log.push(user("u1", "hi"));
        }
        log.push(request_header(prompt));
        log.push(step_end(step));
    }
    log.push(TURN_END.to_owned());
    log
}

// Goal: four system events for first, first, changed, absent, "": the head, then a replace
// for each change, each replacing the previous head and citing it.
// Method: compare the seq, op, sources and content of every system event.
#[test]
fn prompt_changes_replace_the_head() {
    let migrated = migrate(HEADER, &prompt_sequence()).expect("migrates");
    let systems: Vec<_> = migrated
        .events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::SystemMessage(d) => {
                let text: Vec<_> = d
                    .message
                    .content
                    .iter()
                    .filter_map(|b| b.as_text())
                    .collect();
                Some((
                    e.seq,
                    e.surface_op,
                    e.source_event_seqs.clone(),
                    text.join(""),
                ))
            }
            _ => None,
        })
        .collect();
    let replace = |h| {
        Some(SurfaceOp::Replace {
            start_seq: h,
            end_seq: h,
        })
    };
    let expected = vec![
        (2, Some(SurfaceOp::Append), None, String::new()),
        (4, replace(2), Some(vec![2]), "first".to_owned()),
        (11, replace(4), Some(vec![4]), "second".to_owned()),
        (15, replace(11), Some(vec![11]), String::new()),
    ];
    assert_eq!(systems, expected);
    assert_eq!(migrated.requests_proved, 5);
    let cleared = &migrated.events[15];
    assert!(matches!(&cleared.data, EventData::SystemMessage(d) if d.message.content.is_empty()));
    for event in &migrated.events {
        if let EventData::RequestHeader(d) = &event.data {
            assert_eq!(
                d.header.system, None,
                "header.system is stripped at {}",
                event.seq
            );
        }
    }
    assert_eq!(
        v3_row(&migrated.events[11])["surfaceOp"],
        json!({"op":"replace","startSeq":4,"endSeq":4})
    );
}

// Goal: an absent system and "" both mean "no prompt": no replace, same output.
// Method: migrate both and compare the event lists.
#[test]
fn absent_prompt_equals_empty_prompt() {
    let with = |system| {
        let log = vec![
            TURN_START.to_owned(),
            step_start(1),
            request_header(system),
            STEP_END.to_owned(),
        ];
        migrate(HEADER, &log).expect("migrates").events
    };
    let absent = with(None);
    assert_eq!(
        kinds(&absent),
        [
            "turn/start",
            "step/start",
            "system/message",
            "request/header",
            "step/end"
        ]
    );
    assert_eq!(absent, with(Some(r#""""#)));
}

// Goal: whitespace-only text is a prompt, kept verbatim.
// Method: a "  " prompt becomes a head replace with one text block "  ".
#[test]
fn whitespace_prompt_is_kept() {
    let log = vec![
        TURN_START.to_owned(),
        step_start(1),
        request_header(Some(r#""  ""#)),
    ];
    let migrated = migrate(HEADER, &log).expect("migrates");
    let row = v3_row(&migrated.events[3]);
    assert_eq!(
        row["data"]["message"]["content"],
        json!([{"type":"text","text":"  "}])
    );
    assert_eq!(migrated.requests_proved, 1);
}

// Goal: the id collision refusals, both ways.
// Method: a source id equal to an earlier generated id, then a generated id equal to an
// earlier source id (an inbox message before the first step).
#[test]
fn id_collisions_refuse() {
    let generated = system_message_id("s1", 1, "step/start");
    let log = vec![TURN_START.to_owned(), step_start(1), user(&generated, "hi")];
    let refusal = migrate(HEADER, &log).expect_err("collides");
    assert_eq!(refusal.seq, Some(2));
    assert_eq!(
        refusal.to_string(),
        "source message id collides with a generated system message id"
    );

    let inbox = format!(
        r#"{{"type":"agent/inbox/spliced","data":{{"target":"next-turn","start":0,"inserted":[{{"id":"{generated}","role":"user","source":{{"kind":"user"}},"content":[]}}]}}}}"#
    );
    // A step outside a turn: the edge's own refusal, on a log the reader would refuse first.
    let log = vec![inbox, step_start(1)];
    let refusal = migrate_decoded(HEADER, &log).expect_err("collides");
    assert_eq!(refusal.seq, Some(1));
    assert!(matches!(
        refusal.reason,
        Reason::GeneratedIdCollision { .. }
    ));
    assert_eq!(
        refusal.to_string(),
        "generated system message id collides with an existing message id"
    );
}

// Goal: the two chronology refusals with the corpus inventory's exact texts.
// Method: a surface event before any step; a changed prompt outside a step; both at line 3.
#[test]
fn chronology_refusals_use_the_corpus_texts() {
    let log = vec![TURN_START.to_owned(), user("u1", "hi")];
    let refusal = migrate(HEADER, &log).expect_err("surface before step");
    assert_eq!(
        corpus_text(&refusal),
        "session snapshot line 3: format v2 surface before first step cannot acquire a system \
         head without changing chronology"
    );
    let log = vec![TURN_START.to_owned(), request_header(Some(r#""x""#))];
    let refusal = migrate(HEADER, &log).expect_err("prompt outside step");
    assert_eq!(
        corpus_text(&refusal),
        "session snapshot line 3: format v2 changed request prompt outside an open step cannot \
         retain source chronology"
    );
    // Between steps, too: the head exists but no step is open.
    let log = vec![
        TURN_START.to_owned(),
        step_start(1),
        STEP_END.to_owned(),
        request_header(Some(r#""x""#)),
    ];
    let refusal = migrate(HEADER, &log).expect_err("prompt between steps");
    assert_eq!(
        (refusal.seq, refusal.reason),
        (Some(3), Reason::PromptOutsideStep)
    );
    // An unchanged prompt outside a step needs no system event and is accepted.
    let log = vec![TURN_START.to_owned(), request_header(None)];
    assert_eq!(migrate(HEADER, &log).expect("no change").requests_proved, 1);
}

// Goal: a seeded source reports the target cut, synthetic events before the marker counted.
// Method: the five-event seeded example (head and a replace precede the marker): cut 6.
#[test]
fn seeded_cut_counts_synthetic_events() {
    let log = vec![
        TURN_START.to_owned(),
        step_start(1),
        request_header(Some(r#""x""#)),
        STEP_END.to_owned(),
        r#"{"type":"session/end-seed","data":{"inherited":true}}"#.to_owned(),
    ];
    let migrated = migrate(SEEDED, &log).expect("migrates");
    assert_eq!(migrated.cut, 6);
    assert_eq!(migrated.events[6].kind.as_str(), "session/end-seed");

    let refusal = migrate(SEEDED, &log[..4]).expect_err("no marker");
    assert_eq!(refusal.reason, Reason::InheritedMarkerMissing);
    let refusal = migrate(HEADER, &log).expect_err("marker in an unseeded log");
    assert_eq!(
        (refusal.seq, refusal.reason),
        (Some(4), Reason::InheritedMarkerUnseeded)
    );
}

fn tool_result(id: &str, is_error: bool) -> String {
    format!(
        r#"{{"type":"tool/result","data":{{"turn":1,"step":1,"message":{{"id":"{id}","role":"user","source":{{"kind":"tool","callId":"call_1"}},"content":[{{"type":"tool-result","toolCallId":"call_1","content":[{{"type":"text","text":"The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."}}],"isError":{is_error}}}]}},"error":{{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}}},"surfaceOp":"append"}}"#
    )
}

const ASSISTANT_CALL: &str = r#"{"type":"assistant/message","data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"tool-call","id":"call_1","name":"bash","arguments":"{}"}]},"stream":[]},"surfaceOp":"append"}"#;

// Goal: a TOOL_NOT_STARTED repair id keeps its historical suffix at its new seq.
// Method: the id ends in -4 and the event moves from seq 4 to seq 6; then a non-canonical
// id and a contradictory error are refused.
#[test]
fn tool_not_started_id_is_kept() {
    let log = vec![
        TURN_START.to_owned(),
        step_start(1),
        request_header(Some(r#""x""#)),
        ASSISTANT_CALL.to_owned(),
        tool_result("interrupted-tool-result-call_1-4", true),
    ];
    let migrated = migrate(HEADER, &log).expect("migrates");
    let moved = &migrated.events[6];
    assert_eq!(moved.seq, 6);
    assert_eq!(
        moved.message().and_then(|m| m.id.as_deref()),
        Some("interrupted-tool-result-call_1-4")
    );

    let mut bad = log.clone();
    bad[4] = tool_result("interrupted-tool-result-call_1-x", true);
    // The reader refuses these first (the relationship rules); the edge refuses them too.
    let refusal = migrate_decoded(HEADER, &bad).expect_err("non-canonical id");
    assert!(
        matches!(refusal.reason, Reason::Payload { .. }),
        "{refusal}"
    );
    assert_eq!(refusal.seq, Some(4));
    bad[4] = tool_result("interrupted-tool-result-call_1-4", false);
    let refusal = migrate_decoded(HEADER, &bad).expect_err("contradictory error");
    assert!(refusal.to_string().contains("isError"), "{refusal}");
}
