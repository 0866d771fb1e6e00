//! dsh's own recordings (spec 18), read in place from `../shared/fixtures/dsh`.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    read_log, ContentBlock, Event, EventData, FormatVersion, ReadOptions, SessionFold,
    SessionHeader,
};
use sessionlog_migrations::{Stage, StageOptions, V2ToV3};

use crate::support::*;

const TEXT_TURN: &str = "knyazev741__deepseek-harness/snapshots/sdk/text-turn";
const PIN_TURN_V2: &str = "0r4ng3cc__deepseek-harness/packages/test-support/session-snapshot/tests/fixtures/suite/pin-turn/session.v2.jsonl";

/// The derived messages at each `request/header`, as (role, content): what a request sends.
fn requests(events: &[Event]) -> Vec<Vec<(String, Vec<ContentBlock>)>> {
    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot: true,
    };
    let mut fold = SessionFold::new(ctx);
    let mut requests = Vec::new();
    for event in events {
        fold.admit(Arc::new(event.clone())).expect("a valid v3 log");
        if matches!(event.data, EventData::RequestHeader(_)) {
            let messages = fold.messages().into_iter();
            let messages =
                messages.map(|m| (m.role.clone().unwrap_or_default(), m.content.clone()));
            requests.push(messages.collect());
        }
    }
    requests
}

// Goal: a genuine V2 recording migrates, and each request's derived messages equal those of
// the V3 re-recording of the same scenario (roles and contents; ids are not compared).
// Method: migrate text-turn/session.v2.jsonl, fold both V3 logs, compare per request.
#[test]
fn text_turn_matches_its_v3_recording() {
    let Some(dir) = fixtures_dir() else { return };
    let read = |name: &str| {
        let bytes = std::fs::read(dir.join(TEXT_TURN).join(name)).expect("fixture is readable");
        read_log(bytes.as_slice(), ReadOptions::default()).expect("fixture reads")
    };
    let v2 = read("session.v2.jsonl");
    let v3 = read("session.v3.jsonl");
    assert!(v2.snapshot);
    let migrated = migrate_events(v2.header, v2.events).expect("text-turn migrates");
    assert_eq!(migrated.requests_proved, 1);
    assert_eq!(migrated.header.version, Some(3));
    let migrated_requests = requests(&migrated.events);
    assert_eq!(migrated_requests.len(), 1);
    assert_eq!(migrated_requests, requests(&v3.events));
    assert_eq!(migrated_requests[0][0].0, "system");
}

// Goal: the interim V2 file with system/message rows is refused: by our reader at read time,
// and by the stage itself with the edge's text.
// Method: read it (expect the unknown-type fault at line 4), then feed its rows, parsed by
// hand, straight into the stage.
#[test]
fn interim_v2_file_is_refused() {
    let Some(dir) = fixtures_dir() else { return };
    let bytes = std::fs::read(dir.join(PIN_TURN_V2)).expect("fixture is readable");
    let error = read_log(bytes.as_slice(), ReadOptions::default()).expect_err("refused on read");
    let fault = error.fault().expect("a fault");
    assert_eq!(fault.line, 4);
    assert!(fault.message.contains("system/message"), "{fault}");

    let text = String::from_utf8(bytes).expect("utf-8");
    let mut lines = text.lines();
    let header: SessionHeader =
        serde_json::from_str(lines.next().expect("header")).expect("header");
    let mut stage = V2ToV3::new(StageOptions { snapshot: true });
    stage.header(header).expect("a released v2 header");
    let mut out = Vec::new();
    let refusal = lines
        .enumerate()
        .find_map(|(seq, line)| {
            let event = hand_event(seq as u64, line);
            stage.push(event, &mut out).err()
        })
        .expect("the stage refuses");
    assert_eq!(
        corpus_text(&refusal),
        "session snapshot line 4: format v2 to v3 cannot safely transform unclassified event \
         system/message"
    );
}

/// A normalized row as an event, typed through a V3 one-row log (V3 knows `system/message`)
/// and renumbered; good enough for the rows of the pin-turn file.
fn hand_event(seq: u64, line: &str) -> Event {
    let row: serde_json::Value = serde_json::from_str(line).expect("a row");
    let kind = sessionlog_format::EventType::parse(row["type"].as_str().expect("a type"));
    let data = row["data"].clone();
    let typed = match kind {
        sessionlog_format::EventType::SystemMessage => {
            EventData::SystemMessage(Box::new(serde_json::from_value(data).expect("system data")))
        }
        sessionlog_format::EventType::TurnStart => {
            EventData::TurnStart(Box::new(serde_json::from_value(data).expect("turn data")))
        }
        sessionlog_format::EventType::StepStart => {
            EventData::StepStart(Box::new(serde_json::from_value(data).expect("step data")))
        }
        _ => return Event::other(seq, 0, kind, data),
    };
    let event = Event::new(seq, 0, typed);
    match row.get("surfaceOp") {
        Some(_) => event.with_surface_op(sessionlog_format::SurfaceOp::Append),
        None => event,
    }
}
