//! The worked example of spec 15, built by hand from its table.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{FormatVersion, SessionFold};

use crate::support::*;

fn source() -> Vec<String> {
    let assistant = |turn: u64| {
        format!(
            r#"{{"type":"assistant/message","data":{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"text","text":"ok"}}]}},"stream":[]}},"surfaceOp":"append"}}"#
        )
    };
    let header = |reason: &str| {
        format!(
            r#"{{"type":"request/header","data":{{"header":{{"config":{{"provider":"p","model":"m"}},"system":"{{{{system}}}}","tools":"{{{{tools}}}}"}},"reason":"{reason}"}}}}"#
        )
    };
    rows(&[
        r#"{"type":"agent-preset/selected","data":{"agentPreset":"default"}}"#,
        r#"{"type":"sandbox/mode","data":{"mode":"workspace-write"}}"#,
        r#"{"type":"approval/policy","data":{"policy":"ask"}}"#,
        r#"{"type":"agent/inbox/spliced","data":{"target":"next-turn","start":0,"inserted":[]}}"#,
        TURN_START,
        r#"{"type":"agent/inbox/spliced","data":{"target":"next-turn","start":0,"removedCount":0,"inserted":[]}}"#,
        &step_start(1),
        &user("u1", "look at this image"),
        &user("u2", "runtime context"),
        r#"{"type":"session/title","data":{"title":"t","messageSeqs":[7],"source":{"kind":"fallback"}}}"#,
        &header("initial"),
        r#"{"type":"request/context","data":{"provider":"p","model":"m"}}"#,
        &assistant(1),
        STEP_END,
        TURN_END,
        r#"{"type":"turn/start","data":{"turn":2}}"#,
        r#"{"type":"sandbox/mode","data":{"mode":"workspace-write"}}"#,
        r#"{"type":"approval/policy","data":{"policy":"ask"}}"#,
        r#"{"type":"compaction/start","data":{"compactionId":"c1","turn":2}}"#,
        r#"{"type":"compaction/summary","data":{"compactionId":"c1","summary":[{"type":"text","text":"s"}],"shadowedRange":{"start":7,"end":7},"shadowedSeqs":[7],"shadowedTokenCount":9,"provider":"p","model":"m"}}"#,
        r#"{"type":"user/message","data":{"id":"k1","role":"user","source":{"kind":"plugin","plugin":"compact","compactionId":"c1"},"content":[{"type":"text","text":"summary"}]},"surfaceOp":{"op":"replace","start":7,"end":7},"sourceEventSeqs":[18,19,7]}"#,
        r#"{"type":"compaction/end","data":{"compactionId":"c1","turn":2}}"#,
        r#"{"type":"step/start","data":{"turn":2,"step":1}}"#,
        &user("u3", "next"),
        &header("series"),
        &assistant(2),
        r#"{"type":"step/end","data":{"turn":2,"step":1}}"#,
        r#"{"type":"turn/end","data":{"turn":2,"reason":{"kind":"completed"}}}"#,
    ])
}

// Goal: the table of spec 15: target seqs, the inserted head and replace, the remapped
// title, summary and checkpoint, and the surface [11, 8, 9] then [11, 22, 9].
// Method: migrate, compare the rows the table names, then fold the output to the two points.
#[test]
fn worked_example_of_section_15() {
    let source = source();
    assert_eq!(source.len(), 28);
    let migrated = migrate(HEADER, &source).expect("migrates");
    assert_eq!(migrated.events.len(), 30);
    assert_eq!(migrated.requests_proved, 2);
    let row = |seq: usize| v3_row(&migrated.events[seq]);
    assert_eq!(row(7)["surfaceOp"], json!("append"));
    assert_eq!(row(7)["data"]["message"]["content"], json!([]));
    assert_eq!(row(10)["data"]["messageSeqs"], json!([8]));
    assert_eq!(
        row(11)["surfaceOp"],
        json!({"op":"replace","startSeq":7,"endSeq":7})
    );
    assert_eq!(row(11)["sourceEventSeqs"], json!([7]));
    assert_eq!(
        row(11)["data"]["message"]["content"],
        json!([{"type":"text","text":"{{system}}"}])
    );
    let id = sessionlog_migrations::system_message_id("s1", 10, "request/header");
    assert_eq!(row(11)["data"]["message"]["id"], json!(id));
    assert_eq!(
        row(12)["data"],
        json!({"header":{"config":{"provider":"p","model":"m"},"tools":"{{tools}}"},"reason":"initial"})
    );
    assert_eq!(row(21)["data"]["shadowedRange"], json!({"start":8,"end":8}));
    assert_eq!(row(21)["data"]["shadowedSeqs"], json!([8]));
    assert_eq!(
        row(22)["surfaceOp"],
        json!({"op":"replace","startSeq":8,"endSeq":8})
    );
    assert_eq!(row(22)["sourceEventSeqs"], json!([20, 21, 8]));
    assert_eq!(
        kinds(&migrated.events[25..27]),
        ["user/message", "request/header"]
    );
    let systems = migrated
        .events
        .iter()
        .filter(|e| e.kind.as_str() == "system/message");
    assert_eq!(
        systems.count(),
        2,
        "the unchanged series header inserts nothing"
    );

    let mut fold = SessionFold::new(RuleContext {
        version: FormatVersion::V3,
        snapshot: true,
    });
    let nodes = |fold: &SessionFold| -> Vec<u64> {
        fold.admission()
            .surface()
            .nodes()
            .iter()
            .map(|n| n.seq)
            .collect()
    };
    for event in &migrated.events[..13] {
        fold.admit(Arc::new(event.clone())).expect("admitted");
    }
    assert_eq!(nodes(&fold), [11, 8, 9]);
    for event in &migrated.events[13..23] {
        fold.admit(Arc::new(event.clone())).expect("admitted");
    }
    assert_eq!(nodes(&fold), [11, 22, 9, 14]);
}
