//! Helpers shared by the integration tests: V2 logs from rows, V3 rows from events.

use std::path::PathBuf;

use serde_json::Value;
use sessionlog_format::row::encode_row;
use sessionlog_format::{read_log, Event, FormatVersion, ReadOptions, SessionHeader, SnapshotMode};
use sessionlog_migrations::{migrate_v2_to_v3_with, Migrated, Refusal, StageOptions};

/// An unseeded V2 header for session `s1`.
pub const HEADER: &str = r#"{"type":"session","version":2,"id":"s1","createdAt":0,"isSeeded":false,"delegationDepth":0}"#;

/// A seeded V2 header for session `s2`, forked from `s1`.
pub const SEEDED: &str = r#"{"type":"session","version":2,"id":"s2","createdAt":0,"parentSession":"s1","isSeeded":true,"delegationDepth":1}"#;

pub const TURN_START: &str = r#"{"type":"turn/start","data":{"turn":1}}"#;
pub const STEP_END: &str = r#"{"type":"step/end","data":{"turn":1,"step":1}}"#;
pub const TURN_END: &str = r#"{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#;

/// `step/start {1, step}`.
pub fn step_start(step: u64) -> String {
    format!(r#"{{"type":"step/start","data":{{"turn":1,"step":{step}}}}}"#)
}

/// `step/end {1, step}`.
pub fn step_end(step: u64) -> String {
    format!(r#"{{"type":"step/end","data":{{"turn":1,"step":{step}}}}}"#)
}

/// An appended user message.
pub fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"type":"user/message","data":{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}},"surfaceOp":"append"}}"#
    )
}

/// A `request/header` whose `system` member is `system` (a JSON value text) or absent.
pub fn request_header(system: Option<&str>) -> String {
    let system = system.map_or(String::new(), |s| format!(r#","system":{s}"#));
    format!(
        r#"{{"type":"request/header","data":{{"header":{{"config":{{"provider":"p","model":"m"}}{system}}},"reason":"initial"}}}}"#
    )
}

/// Reads a V2 log (normalized-recording mode: rows need no `seq`).
pub fn read_v2(header: &str, rows: &[String]) -> (SessionHeader, Vec<Event>) {
    let mut text = format!("{header}\n");
    for row in rows {
        text.push_str(row);
        text.push('\n');
    }
    let options = ReadOptions {
        snapshot: SnapshotMode::On,
        ..ReadOptions::default()
    };
    let log = read_log(text.as_bytes(), options).expect("the test log is valid V2");
    assert_eq!(log.version, FormatVersion::V2);
    (log.header, log.events)
}

/// Decodes a V2 log's rows under the stateless rules only, for the edge's own refusals of
/// logs that the relationship rules (spec 12.2) would refuse first when read.
pub fn decode_v2(header: &str, rows: &[String]) -> (SessionHeader, Vec<Event>) {
    use sessionlog_format::row::{decode_row, Decoded, RowContext};
    use sessionlog_format::rules::{check_event, RuleContext};
    let header: SessionHeader = serde_json::from_str(header).expect("a header");
    let ctx = RowContext {
        version: FormatVersion::V2,
        snapshot: true,
        skim: false,
    };
    let rules = RuleContext {
        version: FormatVersion::V2,
        snapshot: true,
    };
    let events = rows.iter().enumerate().map(|(seq, row)| {
        let Ok(Decoded::One(event)) = decode_row(row.as_bytes(), ctx, seq as u64) else {
            panic!("row {seq} decodes");
        };
        check_event(&event, rules).expect("the row passes the stateless rules");
        *event
    });
    (header, events.collect())
}

/// Decodes (without the relationship rules) and migrates a V2 log.
pub fn migrate_decoded(header: &str, rows: &[String]) -> Result<Migrated, Refusal> {
    let (header, events) = decode_v2(header, rows);
    migrate_events(header, events)
}

/// Reads and migrates a V2 log.
pub fn migrate(header: &str, rows: &[String]) -> Result<Migrated, Refusal> {
    let (header, events) = read_v2(header, rows);
    migrate_events(header, events)
}

/// Migrates events (snapshot rules, as [`read_v2`] reads them).
pub fn migrate_events(header: SessionHeader, events: Vec<Event>) -> Result<Migrated, Refusal> {
    migrate_v2_to_v3_with(header, events, StageOptions { snapshot: true })
}

/// The refusal as the corpus inventory words it: `session snapshot line N: text`.
pub fn corpus_text(refusal: &Refusal) -> String {
    let line = refusal.v2_line().expect("the refusal names an event");
    format!("session snapshot line {line}: {refusal}")
}

/// One event as its V3 row, parsed back to JSON.
pub fn v3_row(event: &Event) -> Value {
    let mut out = Vec::new();
    encode_row(event, FormatVersion::V3, &mut out);
    serde_json::from_slice(&out).expect("an encoded row is JSON")
}

/// The type names of `events`.
pub fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

/// Converts string rows.
pub fn rows(rows: &[&str]) -> Vec<String> {
    rows.iter().map(|r| (*r).to_owned()).collect()
}

/// `../shared/fixtures/dsh` beside the workspace, or `None` (with a note) on a fresh clone.
pub fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh");
    if dir.is_dir() {
        return Some(dir);
    }
    eprintln!(
        "skipping: {} is missing (the dsh fixtures live beside the checkout)",
        dir.display()
    );
    None
}
