//! Reference remapping, renames, canonicalization, delivery markers and trivial logs
//! (spec 10.3 to 10.5, 10.7).

use pretty_assertions::assert_eq;
use serde_json::json;
use sessionlog_format::SurfaceOp;
use sessionlog_migrations::Reason;

use crate::support::*;

const SUMMARY: &str = r#"{"type":"compaction/summary","data":{"compactionId":"c1","summary":[{"type":"text","text":"s"}],"shadowedRange":{"start":2,"end":2},"shadowedSeqs":[2],"shadowedTokenCount":5,"provider":"p","model":"m"}}"#;
const PRUNE: &str = r#"{"type":"compaction/prune","data":{"shadowedRange":{"start":3,"end":3},"shadowedSeqs":[3],"shadowedTokenCount":5}}"#;

/// Every remapped field once: title, title request, command/done, summary, prune, and the
/// surface envelope of both checkpoints.
fn references_log() -> Vec<String> {
    rows(&[
        TURN_START,
        &step_start(1),
        &user("u1", "one"),
        &user("u2", "two"),
        r#"{"type":"session/title","data":{"title":"t","messageSeqs":[2],"source":{"kind":"fallback"}}}"#,
        r#"{"type":"session/title-llm-request","data":{"titleProvider":"p","messageSeqs":[2,3],"route":"r","system":"sys 2","messages":[{"id":"t1","role":"user","source":{"kind":"plugin","plugin":"dsh-session-title-llm"},"content":[{"type":"text","text":"x"}]}],"maxTokens":9}}"#,
        r#"{"type":"command/run","data":{"commandId":"k1","name":"compact","source":{"kind":"user"}}}"#,
        r#"{"type":"command/done","data":{"commandId":"k1","kind":"success","sourceEventSeq":4}}"#,
        r#"{"type":"compaction/start","data":{"compactionId":"c1","turn":1}}"#,
        SUMMARY,
        r#"{"type":"user/message","data":{"id":"k1","role":"user","source":{"kind":"plugin","plugin":"compact","compactionId":"c1"},"content":[{"type":"text","text":"sum"}]},"surfaceOp":{"op":"replace","start":2,"end":2},"sourceEventSeqs":[8,9,2]}"#,
        PRUNE,
        r#"{"type":"user/message","data":{"id":"k2","role":"user","source":{"kind":"user"},"content":[]},"surfaceOp":{"op":"replace","start":3,"end":3},"sourceEventSeqs":[11,3]}"#,
        r#"{"type":"compaction/end","data":{"compactionId":"c1","turn":1}}"#,
        STEP_END,
    ])
}

// Goal: each row of the remapping table (spec 10.4) names target seqs after the head insert.
// Method: every source seq >= 2 moves by one; compare each remapped field.
#[test]
fn references_are_remapped() {
    let migrated = migrate(HEADER, &references_log()).expect("migrates");
    let row = |seq: usize| v3_row(&migrated.events[seq]);
    assert_eq!(row(5)["data"]["messageSeqs"], json!([3]));
    assert_eq!(row(6)["data"]["messageSeqs"], json!([3, 4]));
    assert_eq!(
        row(6)["data"]["system"],
        json!("sys 2"),
        "title request text is not remapped"
    );
    assert_eq!(row(8)["data"]["sourceEventSeq"], json!(5));
    assert_eq!(row(10)["data"]["shadowedRange"], json!({"start":3,"end":3}));
    assert_eq!(row(10)["data"]["shadowedSeqs"], json!([3]));
    assert_eq!(
        row(11)["surfaceOp"],
        json!({"op":"replace","startSeq":3,"endSeq":3})
    );
    assert_eq!(row(11)["sourceEventSeqs"], json!([9, 10, 3]));
    assert_eq!(row(12)["data"]["shadowedRange"], json!({"start":4,"end":4}));
    assert_eq!(row(12)["data"]["shadowedSeqs"], json!([4]));
    assert_eq!(
        migrated.events[13].surface_op,
        Some(SurfaceOp::Replace {
            start_seq: 4,
            end_seq: 4
        })
    );
    assert_eq!(migrated.events[13].source_event_seqs, Some(vec![12, 4]));
}

// Goal: a reference to an event without an earlier mapping is refused.
// Method: command/done citing its own seq (hand-edited source event).
#[test]
fn unmapped_reference_refuses() {
    let log = rows(&[
        TURN_START,
        r#"{"type":"command/done","data":{"commandId":"k1","kind":"success","sourceEventSeq":1}}"#,
    ]);
    let refusal = migrate_decoded(HEADER, &log).expect_err("self reference");
    assert_eq!(
        (refusal.seq, refusal.reason),
        (
            Some(1),
            Reason::UnmappedReference {
                field: "sourceEventSeq",
                target: 1
            }
        )
    );
}

// Goal: the PTC and preset renames apply in their named places only (spec 10.5).
// Method: renamed tags, plugin attributions and presets next to look-alikes that stay.
#[test]
fn renames_leave_look_alikes() {
    let header = r#"{"type":"session","version":2,"id":"s1","createdAt":0,"isSeeded":false,"delegationDepth":0,"agentPreset":"code"}"#;
    let plugin_user = |id: &str, plugin: &str| {
        format!(
            r#"{{"type":"user/message","data":{{"id":"{id}","role":"user","source":{{"kind":"plugin","plugin":"{plugin}"}},"content":[{{"type":"text","text":"tools-code-mode run_code"}}]}},"surfaceOp":"append"}}"#
        )
    };
    let log = rows(&[
        r#"{"type":"agent-preset/selected","data":{"agentPreset":"code"}}"#,
        r#"{"type":"agent-preset/selected","data":{"agentPreset":"code-review"}}"#,
        r#"{"type":"agent/inbox/spliced","data":{"target":"next-turn","start":0,"inserted":[{"id":"i1","role":"user","source":{"kind":"plugin","plugin":"tools-code-mode"},"content":[]},{"id":"i2","role":"user","source":{"kind":"plugin","plugin":"tools-code-mode-extra"},"content":[]}]}}"#,
        TURN_START,
        &step_start(1),
        &plugin_user("m:code:1", "tools-code-mode"),
        &plugin_user("m2", "tools-code-mode-extra"),
        r#"{"type":"tool/code-dispatch-start","data":{"rootCallId":"r","parentCallId":"r","subCallId":"s","name":"run_code","arguments":{"code":"x"}}}"#,
        r#"{"type":"tool/code-dispatch","data":{"rootCallId":"r","parentCallId":"r","subCallId":"s","name":"run_code","arguments":{"code":"x"},"isError":false,"content":[]}}"#,
    ]);
    let (header, events) = read_v2(header, &log);
    let migrated = migrate_events(header, events).expect("migrates");
    assert_eq!(migrated.header.agent_preset.as_deref(), Some("ptc"));
    assert_eq!(migrated.header.version, Some(3));
    let row = |seq: usize| v3_row(&migrated.events[seq]);
    assert_eq!(row(0)["data"]["agentPreset"], json!("ptc"));
    assert_eq!(row(1)["data"]["agentPreset"], json!("code-review"));
    assert_eq!(
        row(2)["data"]["inserted"][0]["source"]["plugin"],
        json!("tools-ptc")
    );
    assert_eq!(
        row(2)["data"]["inserted"][1]["source"]["plugin"],
        json!("tools-code-mode-extra")
    );
    assert_eq!(row(6)["data"]["source"]["plugin"], json!("tools-ptc"));
    assert_eq!(row(6)["data"]["id"], json!("m:code:1"));
    assert_eq!(
        row(6)["data"]["content"][0]["text"],
        json!("tools-code-mode run_code")
    );
    assert_eq!(
        row(7)["data"]["source"]["plugin"],
        json!("tools-code-mode-extra")
    );
    assert_eq!(
        kinds(&migrated.events[8..]),
        ["tool/ptc-dispatch-start", "tool/ptc-dispatch"]
    );
    assert_eq!(row(8)["data"]["name"], json!("run_code"));
    assert_eq!(row(9)["data"]["arguments"], json!({"code":"x"}));
}

// Goal: canonicalization drops exactly tools:[] and adapterDefaults:{} (spec 10.7).
// Method: a header with both, plus config.stop:[] and a non-empty tools list that stay.
#[test]
fn canonicalization_drops_only_empty_members() {
    let empty = r#"{"type":"request/header","data":{"header":{"config":{"provider":"p","model":"m","stop":[]},"tools":[],"adapterDefaults":{}},"reason":"initial"}}"#;
    let full = r#"{"type":"request/header","data":{"header":{"config":{"provider":"p","model":"m","maxTokens":5},"tools":[{"name":"t"}],"adapterDefaults":{"maxTokens":true}},"reason":"change"}}"#;
    let log = rows(&[TURN_START, &step_start(1), empty, full]);
    let migrated = migrate(HEADER, &log).expect("migrates");
    assert_eq!(
        v3_row(&migrated.events[3])["data"]["header"],
        json!({"config":{"provider":"p","model":"m","stop":[]}})
    );
    assert_eq!(
        v3_row(&migrated.events[4])["data"]["header"],
        json!({"config":{"provider":"p","model":"m","maxTokens":5},"tools":[{"name":"t"}],"adapterDefaults":{"maxTokens":true}})
    );
}

fn delivery(session: &str, version: u64) -> String {
    format!(
        r#"{{"type":"session-log-deepseek/delivery-accepted","data":{{"sessionId":"{session}","sessionFormatVersion":{version},"throughSeq":0}}}}"#
    )
}

// Goal: the delivery-marker rules of spec 10.3 step 7.
// Method: a v3 claim; a foreign v2 marker in an unseeded log; the same marker inside a seeded
// child's inherited prefix; the session's own marker.
#[test]
fn delivery_markers() {
    let refusal =
        migrate(HEADER, &[TURN_START.to_owned(), delivery("s1", 3)]).expect_err("v3 claim");
    assert_eq!(refusal.seq, Some(1));
    assert_eq!(
        refusal.to_string(),
        "format v2 delivery marker claims target format v3"
    );

    // The reader refuses it first (the relationship rules); the edge refuses it too.
    let refusal = migrate_decoded(HEADER, &[delivery("other", 2)]).expect_err("foreign marker");
    assert_eq!(refusal.seq, Some(0));
    assert_eq!(
        refusal.to_string(),
        "current-generation delivery marker names the wrong Session"
    );

    let seed = r#"{"type":"session/end-seed","data":{"inherited":true}}"#.to_owned();
    let inherited = migrate(SEEDED, &[delivery("s1", 2), seed.clone()]).expect("inherited marker");
    assert_eq!(inherited.cut, 1);
    let refusal = migrate_decoded(SEEDED, &[seed, delivery("s1", 2)]).expect_err("after the cut");
    assert_eq!(refusal.seq, Some(1));
    migrate(HEADER, &[delivery("s1", 2)]).expect("own marker");
}

// Goal: a metadata-only log gets no head, and an empty log stays empty.
// Method: compare the output with the input and check the cut.
#[test]
fn metadata_only_and_empty_logs() {
    let log = rows(&[
        r#"{"type":"permission/preset","data":{"preset":"workspace-write"}}"#,
        r#"{"type":"sandbox/mode","data":{"mode":"workspace-write"}}"#,
        TURN_START,
        TURN_END,
    ]);
    let (header, events) = read_v2(HEADER, &log);
    let migrated = migrate_events(header, events.clone()).expect("migrates");
    assert_eq!(migrated.events, events);
    let empty = migrate(HEADER, &[]).expect("migrates");
    assert_eq!(
        (empty.events.len(), empty.cut, empty.requests_proved),
        (0, 0, 0)
    );
    assert_eq!(empty.header.version, Some(3));
}
